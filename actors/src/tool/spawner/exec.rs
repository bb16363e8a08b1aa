//! tool::spawner::exec — starts one tool from the spawner process with `posix_spawn`: a new
//! process group led by the tool, stdin/stdout/stderr from the given descriptors, the working
//! directory, an empty signal mask and default signal actions, then `execve`.
//!
//! `posix_spawn` (glibc: `clone(CLONE_VM | CLONE_VFORK)`) copies no page tables, runs nothing
//! of ours in the child, and reports a failed `chdir` or `execve` synchronously with its errno:
//! no allocation after a fork, no exec-status pipe to read.
//! Owns: every `unsafe` block of the spawner's launch path, each with its reason.
//! Must not: run any code of ours in the child, or give the child descriptors other than the
//! three it is given (everything else the spawner holds is close-on-exec).

use std::ffi::{c_char, CStr};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::RawFd;

use nix::sys::signal::{SigSet, Signal};

use super::protocol::Spec;

/// Signals whose action the spawner changes for itself (ignored, or handled) and that every
/// tool must get back at their default action, as a tool started by the engine would.
pub(super) const RESET_FOR_TOOLS: [Signal; 6] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGPIPE,
    Signal::SIGCHLD,
];

/// The attributes shared by every launch, built once.
pub(super) struct Launcher {
    attributes: Box<MaybeUninit<libc::posix_spawnattr_t>>,
    /// The signals tools get back at their default action (for sandboxed starts, which
    /// reset them themselves: see `confined.rs`).
    pub(super) defaults: SigSet,
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

impl Launcher {
    /// `keep_ignored`: signals the engine itself ignores, which tools inherit ignored (as
    /// from a fork of the engine) rather than reset to their default.
    pub(super) fn new(keep_ignored: SigSet) -> io::Result<Launcher> {
        let mut attributes = Box::new(MaybeUninit::<libc::posix_spawnattr_t>::uninit());
        let attr = attributes.as_mut_ptr();
        // SAFETY: `attr` points at storage that lives (boxed, never moved) as long as the
        // Launcher; it is initialised by posix_spawnattr_init before any other use.
        check(unsafe { libc::posix_spawnattr_init(attr) })?;
        let mut defaults = SigSet::empty();
        for signal in RESET_FOR_TOOLS {
            if !keep_ignored.contains(signal) {
                defaults.add(signal);
            }
        }
        let launcher = Launcher {
            attributes,
            defaults,
        };
        let flags = libc::POSIX_SPAWN_SETPGROUP
            | libc::POSIX_SPAWN_SETSIGMASK
            | libc::POSIX_SPAWN_SETSIGDEF;
        // SAFETY: `attr` was initialised above; the sets are valid sigset_t values that the
        // calls copy.
        unsafe {
            check(libc::posix_spawnattr_setflags(attr, flags as libc::c_short))?;
            // Group 0: the child becomes the leader of a new group whose id is its pid.
            check(libc::posix_spawnattr_setpgroup(attr, 0))?;
            check(libc::posix_spawnattr_setsigmask(
                attr,
                SigSet::empty().as_ref(),
            ))?;
            check(libc::posix_spawnattr_setsigdefault(attr, defaults.as_ref()))?;
        }
        Ok(launcher)
    }

    /// Starts `spec` with the three descriptors as its stdin, stdout and stderr. Returns the
    /// child's pid, or the errno of what failed (`chdir` into the cwd, or `execve`).
    pub(super) fn launch(
        &self,
        spec: &Spec<'_>,
        stdin: RawFd,
        stdout: RawFd,
        stderr: RawFd,
    ) -> Result<u32, i32> {
        let argv = pointer_array(&spec.argv);
        let envp = pointer_array(&spec.env);
        let actions = FileActions::plan([stdin, stdout, stderr], spec.cwd)
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EINVAL))?;
        let mut pid: libc::pid_t = 0;
        // SAFETY: every pointer is valid for the duration of the call: the program, argv and
        // envp strings borrow the received message, both arrays end with a null pointer, and
        // the attributes and file actions were initialised.
        let rc = unsafe {
            libc::posix_spawn(
                &mut pid,
                spec.program.as_ptr(),
                actions.as_ptr(),
                self.attributes.as_ptr(),
                argv.as_ptr(),
                envp.as_ptr(),
            )
        };
        if rc != 0 {
            return Err(rc);
        }
        u32::try_from(pid).map_err(|_| libc::EINVAL)
    }
}

impl Drop for Launcher {
    fn drop(&mut self) {
        // SAFETY: initialised in `new` (a Launcher only exists after a successful init).
        unsafe {
            libc::posix_spawnattr_destroy(self.attributes.as_mut_ptr());
        }
    }
}

/// NULL-terminated array of pointers into `strings`, as argv / envp.
pub(super) fn pointer_array(strings: &[&CStr]) -> Vec<*mut c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr().cast_mut())
        .chain(std::iter::once(std::ptr::null_mut()))
        .collect()
}

/// The per-launch `posix_spawn_file_actions_t`.
struct FileActions {
    actions: Box<MaybeUninit<libc::posix_spawn_file_actions_t>>,
}

impl FileActions {
    /// `streams[i]` becomes descriptor `i` of the child, which then changes into `cwd`.
    fn plan(streams: [RawFd; 3], cwd: &CStr) -> io::Result<FileActions> {
        let mut storage = Box::new(MaybeUninit::<libc::posix_spawn_file_actions_t>::uninit());
        // SAFETY: boxed storage that is initialised here and never moved afterwards.
        check(unsafe { libc::posix_spawn_file_actions_init(storage.as_mut_ptr()) })?;
        let mut actions = FileActions { actions: storage };
        for (target, fd) in (0..).zip(streams) {
            actions.dup2(fd, target)?;
        }
        actions.chdir(cwd)?;
        Ok(actions)
    }

    fn as_ptr(&self) -> *const libc::posix_spawn_file_actions_t {
        self.actions.as_ptr()
    }

    fn dup2(&mut self, from: RawFd, to: RawFd) -> io::Result<()> {
        // SAFETY: initialised in `plan`; glibc only appends to its own heap array. The
        // descriptors are ours (>= 3, close-on-exec); dup2 clears close-on-exec on the copy.
        check(unsafe {
            libc::posix_spawn_file_actions_adddup2(self.actions.as_mut_ptr(), from, to)
        })
    }

    fn chdir(&mut self, dir: &CStr) -> io::Result<()> {
        // SAFETY: as for `dup2`; glibc copies the path.
        check(unsafe {
            libc::posix_spawn_file_actions_addchdir_np(self.actions.as_mut_ptr(), dir.as_ptr())
        })
    }
}

impl Drop for FileActions {
    fn drop(&mut self) {
        // SAFETY: initialised in `plan` (a FileActions only exists after a successful init).
        unsafe {
            libc::posix_spawn_file_actions_destroy(self.actions.as_mut_ptr());
        }
    }
}
