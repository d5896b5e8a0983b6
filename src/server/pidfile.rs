//! `-I/--pidfile FILE`: the server's process ID in a file while it runs (after `-D` has
//! detached it, so the ID is the one that serves), removed when it exits: on return from
//! the server, and on the second stop signal that ends the process at once. A file that
//! names a running process is another server's, and refused, as iperf3 refuses it.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The written pidfile; dropping it removes the file.
#[derive(Debug)]
pub(crate) struct Pidfile(PathBuf);

impl Pidfile {
    /// Writes this process's ID to `path` (mode 0600), unless the file names a process
    /// that still runs.
    pub(crate) fn create(path: &Path) -> Result<Pidfile> {
        let shown = path.display();
        if let Some(pid) = std::fs::read_to_string(path)
            .ok()
            .and_then(|t| t.trim().parse::<i32>().ok())
            .filter(|&pid| pid > 0 && crate::os::sys::process_exists(pid))
        {
            return Err(Error::Usage(format!(
                "-I/--pidfile {shown}: process {pid} is running with it (another server?); stop \
                 it or choose another file"
            )));
        }
        let mut file = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(path)
        }
        .map_err(|e| Error::io(format!("-I/--pidfile {shown}: create"), e))?;
        writeln!(file, "{}", std::process::id())
            .map_err(|e| Error::io(format!("-I/--pidfile {shown}: write"), e))?;
        crate::signals::unwritten(path);
        Ok(Pidfile(path.to_path_buf()))
    }
}

impl Drop for Pidfile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        crate::signals::written(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written with this process's ID, refused while that process runs, removed on drop.
    #[test]
    fn a_pidfile_names_this_process_and_goes_at_exit() {
        let dir = std::env::temp_dir().join(format!("pinperf-pidfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.pid");
        let held = Pidfile::create(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.trim(), std::process::id().to_string());
        let e = Pidfile::create(&path).unwrap_err().to_string();
        assert!(e.contains("is running with it"), "{e}");
        drop(held);
        assert!(!path.exists());
        // A stale file (no such process) is taken over.
        std::fs::write(&path, "999999999\n").unwrap();
        drop(Pidfile::create(&path).unwrap());
        assert!(!path.exists());
        let _ = std::fs::remove_dir(&dir);
    }
}
