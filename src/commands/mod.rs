//! What the command line runs beyond one test's measuring: where a client run's report
//! goes (`output`, with the client's entry point), the saved-result subcommands (`render`:
//! report, plot, man, completions), `compare`, `diagnose`, the WAN `lab`, reading saved documents
//! (`saved`), and drawing them (`plot`, `html`). They sit above `report` because they draw
//! every kind of saved result (a compare, a lab run), not one test's.

pub mod compare;
pub mod diagnose;
pub(crate) mod html;
pub(crate) mod lab;
pub(crate) mod output;
pub(crate) mod plot;
pub(crate) mod render;
pub(crate) mod saved;
