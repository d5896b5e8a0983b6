//! The enumerated choices the command line offers and the reports echo (clap derives on
//! them): a leaf module, so `cli` needs neither `report` nor `stream`.

/// Output formats (`--format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
    JsonLines,
    Csv,
}

/// `compare`'s output formats: one table, so no live event stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TableFormat {
    Text,
    Json,
    Csv,
}

impl From<TableFormat> for Format {
    fn from(f: TableFormat) -> Format {
        match f {
            TableFormat::Text => Format::Text,
            TableFormat::Json => Format::Json,
            TableFormat::Csv => Format::Csv,
        }
    }
}

/// How the sender drives its streams.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Engine {
    /// One pinned thread per stream, blocking writes (the default).
    Threads,
    /// One thread for all streams, non-blocking writes and poll() (thrulay's client).
    Single,
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Engine::Threads => "threads",
            Engine::Single => "single",
        })
    }
}
