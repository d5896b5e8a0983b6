//! The `pinperf` binary: parse the command line, hand it to the library, turn the outcome
//! into an exit code (0 ran, 1 the test failed, 2 usage). A run that SIGINT, SIGTERM or
//! SIGHUP stopped prints what it measured and then ends by that signal, as if it had not
//! caught it, so the shell sees it (status 128 + the signal) and a loop around pinperf
//! stops. Everything else lives in the library so that tests and benches reach it.

use std::io::Write as _;
use std::process::ExitCode;

fn main() -> ExitCode {
    match pinperf::run_from_env() {
        Ok(()) => ExitCode::SUCCESS,
        // Nobody reads any more (`| head`): stop quietly, as ripgrep does; but a Ctrl-C
        // that also ended the reader (`pinperf | fgrep`) ends this process by it too.
        Err(pinperf::Error::OutputClosed) => match pinperf::stop_signal() {
            Some(sig) => pinperf::die_by_signal(sig),
            None => ExitCode::SUCCESS,
        },
        Err(err) => {
            // A closed stderr loses the message, not the exit code. An error may carry a
            // peer's words (a server's refusal): control characters other than newlines
            // and tabs are escaped, so no escape sequence reaches the terminal.
            let text = pinperf::wire::printable_lines(&err.to_string());
            let _ = std::io::stderr().write_all(format!("pinperf: {text}\n").as_bytes());
            if let Some(sig) = pinperf::stop_signal() {
                let _ = std::io::stdout().flush();
                pinperf::die_by_signal(sig);
            }
            ExitCode::from(err.exit_code())
        }
    }
}
