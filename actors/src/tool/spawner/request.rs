//! tool::spawner::request — what the engine prepares for one spawn request: the tool to start
//! ([`Launch`]), its pipes
//! (its ends are sent, ours kept non-blocking for the async runtime), the NUL check that
//! `std::process::Command` would make, and a memfd for a spec too big to send inline.
//!
//! Must not: talk to the spawner (that is `client.rs`).

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::sys;
use crate::sandbox::RunSandbox;

/// One tool to start.
#[derive(Debug, Clone, Copy)]
pub struct Launch<'a> {
    /// The resolved program (what `execve` gets).
    pub program: &'a Path,
    /// argv, `argv[0]` included.
    pub argv: &'a [String],
    /// The complete environment.
    pub env: &'a [(&'a str, &'a str)],
    /// The working directory (the spawner `chdir`s there before `execve`).
    pub cwd: &'a Path,
    /// A pipe for stdin (else /dev/null).
    pub stdin_pipe: bool,
    /// Confine the tool in this sandbox before `exec` (the spawner applies it in the child).
    pub sandbox: Option<&'a RunSandbox>,
}

/// The tool's three pipes: the engine's ends (non-blocking) and the tool's ends.
pub(super) struct Pipes {
    stdin: Option<(OwnedFd, OwnedFd)>,
    stdout: (OwnedFd, OwnedFd),
    stderr: (OwnedFd, OwnedFd),
}

impl Pipes {
    pub(super) fn new(stdin_pipe: bool) -> io::Result<Pipes> {
        let stdin = if stdin_pipe {
            let (read, write) = sys::cloexec_pipe()?;
            sys::set_nonblocking(write.as_fd())?;
            Some((read, write))
        } else {
            None
        };
        let output = || -> io::Result<(OwnedFd, OwnedFd)> {
            let (read, write) = sys::cloexec_pipe()?;
            sys::set_nonblocking(read.as_fd())?;
            Ok((read, write))
        };
        Ok(Pipes {
            stdin,
            stdout: output()?,
            stderr: output()?,
        })
    }

    /// Ours (stdin's write end when piped, stdout's and stderr's read ends) and the tool's,
    /// in request order (stdin's read end when piped, stdout's and stderr's write ends). The
    /// tool's travel with the request and are closed once it is sent.
    pub(super) fn split(self) -> ((Option<OwnedFd>, OwnedFd, OwnedFd), Vec<OwnedFd>) {
        let mut tool_ends = Vec::with_capacity(4);
        let stdin = self.stdin.map(|(read, write)| {
            tool_ends.push(read);
            write
        });
        tool_ends.push(self.stdout.1);
        tool_ends.push(self.stderr.1);
        ((stdin, self.stdout.0, self.stderr.0), tool_ends)
    }
}

/// The check `std::process::Command` makes, with its wording, so both paths fail alike.
pub(super) fn check_no_nul(launch: &Launch<'_>) -> io::Result<()> {
    let strings = [
        launch.program.as_os_str().as_bytes(),
        launch.cwd.as_os_str().as_bytes(),
    ];
    let sandbox_paths = launch.sandbox.into_iter().flat_map(|sandbox| {
        sandbox
            .writable
            .iter()
            .chain(sandbox.hidden.iter().map(|hidden| &hidden.path))
    });
    let has_nul = strings.iter().any(|s| s.contains(&0))
        || sandbox_paths
            .clone()
            .any(|path| path.as_os_str().as_bytes().contains(&0))
        || launch.argv.iter().any(|a| a.as_bytes().contains(&0))
        || launch
            .env
            .iter()
            .any(|(k, v)| k.as_bytes().contains(&0) || v.as_bytes().contains(&0));
    if has_nul {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "nul byte found in provided data",
        ));
    }
    Ok(())
}

pub(super) fn spec_memfd(spec: &[u8]) -> io::Result<OwnedFd> {
    use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
    let fd = memfd_create(c"delta-tool-spec", MemFdCreateFlag::MFD_CLOEXEC)?;
    let mut file = File::from(fd);
    file.write_all(spec)?;
    Ok(file.into())
}
