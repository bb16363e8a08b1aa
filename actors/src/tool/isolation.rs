//! tool::isolation — what keeps a tool from reaching into the process that started it,
//! beyond its environment (which `process::env` cleans): the engine's memory and
//! `/proc/<pid>/environ`, and the descriptors the engine itself inherited.
//!
//! Owns: [`forbid_inspection`] (`prctl(PR_SET_DUMPABLE, 0)`) and
//! [`close_inherited_descriptors_on_exec`] (`close_range(3, ~0, CLOSE_RANGE_CLOEXEC)`), for
//! a whole process: the `delta` binary calls both at start (the first for the commands that
//! hold a key or a token), the tool spawner both in [`super::spawner::serve_stdin`]; and the
//! same marking in a child about to `exec` (`close_on_exec_in_child`), for tools started
//! in-process by a program that did neither (an embedder).
//! Both change the whole process, so they are tested end to end (`tests/cli/tool_isolation.rs`),
//! not from the library's multi-threaded unit-test process.
//! Must not: close a descriptor (only mark it close-on-exec: the caller may still use it),
//! or be called by the library on an embedder's behalf (both change the whole process).

use std::io;

/// Makes this process non-dumpable. The kernel then refuses, to every process of the same
/// user that lacks `CAP_SYS_PTRACE`, `ptrace` attach and reading `/proc/<pid>/environ`,
/// `/proc/<pid>/mem`, `/proc/<pid>/fd`...: a tool started by this process (or by its spawner)
/// can no longer read the API key from its parent's environment block or memory. Also: no
/// core dump is written if the process crashes, and a debugger must run as root to attach.
///
/// Holds only against processes without `CAP_SYS_PTRACE` (root has it): a tool running as
/// root can read anything of a process of any user. Not inherited across `execve`: tools are
/// ordinary, dumpable processes.
pub fn forbid_inspection() -> io::Result<()> {
    // SAFETY: PR_SET_DUMPABLE takes one integer argument and touches no memory of ours.
    let rc = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// In a child between `fork` and `exec` (a `pre_exec` hook): marks every descriptor from 3 on
/// close-on-exec, so the program gets 0, 1 and 2 only, whatever its parent holds or
/// inherited. Marks rather than closes: the standard library reports a failed `exec`
/// through a close-on-exec pipe of its own. Async-signal-safe (system calls only, no
/// allocation): `close_range(2)`, else `fcntl` on every number below the open-files limit.
pub(crate) fn close_on_exec_in_child() -> io::Result<()> {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets a flag on descriptors.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    // SAFETY: sysconf and fcntl are async-signal-safe and touch no memory of ours.
    unsafe {
        let limit = libc::sysconf(libc::_SC_OPEN_MAX).clamp(3, 1 << 20) as libc::c_int;
        for fd in 3..limit {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
    Ok(())
}

/// Marks every descriptor from 3 on close-on-exec, so none that this process inherited (a
/// shell's `7>file`, a service manager's socket) reaches a program it starts. Descriptors the
/// process opens itself are close-on-exec already (Rust opens everything so); this covers the
/// ones it was given. Uses `close_range(2)` (Linux 5.11+), else walks `/proc/self/fd`.
pub fn close_inherited_descriptors_on_exec() -> io::Result<()> {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets a flag on descriptors; it
    // closes nothing and touches no memory of ours.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let entries = std::fs::read_dir("/proc/self/fd")?;
    // Collected first: the walk itself holds a descriptor (marking it too is harmless).
    let descriptors: Vec<libc::c_int> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd >= 3)
        .collect();
    for fd in descriptors {
        // SAFETY: F_GETFD/F_SETFD only read and set the descriptor's flag; a descriptor
        // closed since the walk just fails with EBADF, which is ignored.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
    Ok(())
}
