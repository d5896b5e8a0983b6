//! The `pinperf` binary: parse the command line, hand it to the library, turn the outcome
//! into an exit code (0 ran, 1 the test failed, 2 usage, 128 + the signal when SIGINT,
//! SIGTERM or SIGHUP stopped a client run after it printed what it measured). Everything
//! else lives in the library so that tests and benches reach it.

use std::process::ExitCode;

fn main() -> ExitCode {
    match pinperf::run_from_env() {
        Ok(()) => ExitCode::SUCCESS,
        // Nobody reads any more (`| head`): stop quietly, as ripgrep does.
        Err(pinperf::Error::OutputClosed) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("pinperf: {err}");
            ExitCode::from(err.exit_code())
        }
    }
}
