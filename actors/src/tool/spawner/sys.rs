//! tool::spawner::sys — the few system calls the spawner needs that nix does not give us
//! without extra dependencies: the SEQPACKET control socket pair, messages carrying
//! descriptors (`SCM_RIGHTS`), close-on-exec pipes.
//!
//! Owns: every `unsafe` block of the engine side of the spawner, each with its reason.
//! Must not: keep state, or return a descriptor that is not close-on-exec (a descriptor
//! without it would leak into every later child of the process holding it).

use std::io;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// At most this many descriptors travel with one message (stdin, stdout, stderr, spec memfd).
pub(crate) const MAX_FDS_PER_MESSAGE: usize = 4;

/// A connected `AF_UNIX` `SOCK_SEQPACKET` pair, both ends close-on-exec. SEQPACKET keeps
/// message boundaries (one request = one `recvmsg`) and reports the peer's exit as EOF.
pub(crate) fn control_socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds: [RawFd; 2] = [-1, -1];
    // SAFETY: `fds` is a valid two-element array for socketpair to fill.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socketpair succeeded, so both descriptors are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Asks for a send buffer of `bytes` on `socket`; the kernel grants at most
/// `net.core.wmem_max` (and at least its own minimum). Best effort: the caller copes with a
/// full socket either way.
pub(crate) fn set_send_buffer(socket: BorrowedFd<'_>, bytes: usize) {
    let size = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: setsockopt reads one c_int from a valid pointer for the given length.
    unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&size as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// A pipe `(read end, write end)`, both close-on-exec and blocking (the spawner's child gets
/// its end through `dup2`, which clears close-on-exec on the copy only).
pub(crate) fn cloexec_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds: [RawFd; 2] = [-1, -1];
    // SAFETY: `fds` is a valid two-element array for pipe2 to fill.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Puts our end of a pipe just made by [`cloexec_pipe`] in non-blocking mode for the async
/// runtime, leaving the other end, which the tool gets, blocking. Such an end has no status
/// flags yet, so this sets `O_NONBLOCK` alone, without reading the flags first (two system
/// calls fewer per tool start): not for any other descriptor.
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: fcntl on a borrowed, open descriptor.
    let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Marks a descriptor close-on-exec (the spawner's control socket arrives as its stdin,
/// which must not reach the tools it starts).
pub(crate) fn set_cloexec(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: fcntl on a borrowed, open descriptor.
    let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `SO_TYPE` of a socket, or an error when `fd` is not a socket.
pub(crate) fn socket_type(fd: BorrowedFd<'_>) -> io::Result<libc::c_int> {
    let mut kind: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `kind` and `len` are valid for getsockopt to write an int option into.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TYPE,
            (&mut kind as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(kind)
}

/// Room for `MAX_FDS_PER_MESSAGE` descriptors in a control message, aligned for `cmsghdr`.
#[repr(C)]
struct FdControlBuffer {
    _align: [libc::cmsghdr; 0],
    bytes: [u8; 64],
}

fn fd_control_space(count: usize) -> usize {
    // SAFETY: CMSG_SPACE is a pure size computation.
    unsafe { libc::CMSG_SPACE((count * size_of::<RawFd>()) as libc::c_uint) as usize }
}

/// Whether a send may wait for room in the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendMode {
    /// Wait until the socket takes the message.
    Wait,
    /// `WouldBlock` at once when the socket is full (`MSG_DONTWAIT`: this call only, the
    /// descriptor stays blocking for the thread that reads it).
    NoWait,
}

/// Sends one message with `fds` attached. Never raises SIGPIPE: a closed peer is `EPIPE`.
pub(crate) fn send_with_fds(
    socket: BorrowedFd<'_>,
    bytes: &[u8],
    fds: &[BorrowedFd<'_>],
    mode: SendMode,
) -> io::Result<()> {
    if fds.len() > MAX_FDS_PER_MESSAGE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "too many descriptors for one spawner message",
        ));
    }
    let mut control = FdControlBuffer {
        _align: [],
        bytes: [0; 64],
    };
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: an all-zero msghdr is a valid empty header.
    let mut header: libc::msghdr = unsafe { MaybeUninit::zeroed().assume_init() };
    header.msg_iov = &mut iov;
    header.msg_iovlen = 1;
    if !fds.is_empty() {
        let space = fd_control_space(fds.len());
        header.msg_control = control.bytes.as_mut_ptr().cast();
        header.msg_controllen = space as _;
        // SAFETY: msg_control points at `space` (<= 64) aligned bytes, enough for one cmsghdr
        // with `fds.len()` descriptors (checked above), so CMSG_FIRSTHDR is non-null and
        // CMSG_DATA has room for the descriptors.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&header);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN((fds.len() * size_of::<RawFd>()) as _) as _;
            let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
            for (i, fd) in fds.iter().enumerate() {
                data.add(i).write_unaligned(fd.as_raw_fd());
            }
        }
    }
    loop {
        // SAFETY: header, iov and control all outlive the call.
        let flags = match mode {
            SendMode::Wait => libc::MSG_NOSIGNAL,
            SendMode::NoWait => libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        };
        let sent = unsafe { libc::sendmsg(socket.as_raw_fd(), &header, flags) };
        if sent >= 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// One received message.
pub(crate) struct Received {
    /// Bytes of the message (0 = the peer closed its end).
    pub len: usize,
    /// The message or its descriptors did not fit: the request must be refused.
    pub truncated: bool,
}

/// Receives one message into `buffer`, appending the descriptors it carried to `fds` (each
/// close-on-exec). Blocks unless the socket is non-blocking; retries on EINTR.
pub(crate) fn recv_with_fds(
    socket: BorrowedFd<'_>,
    buffer: &mut [u8],
    fds: &mut Vec<OwnedFd>,
) -> io::Result<Received> {
    recv_with_flags(socket, buffer, fds, 0)
}

/// [`recv_with_fds`] that never waits: `WouldBlock` when no message is queued
/// (`MSG_DONTWAIT`: this call only).
pub(crate) fn recv_queued_with_fds(
    socket: BorrowedFd<'_>,
    buffer: &mut [u8],
    fds: &mut Vec<OwnedFd>,
) -> io::Result<Received> {
    recv_with_flags(socket, buffer, fds, libc::MSG_DONTWAIT)
}

fn recv_with_flags(
    socket: BorrowedFd<'_>,
    buffer: &mut [u8],
    fds: &mut Vec<OwnedFd>,
    flags: libc::c_int,
) -> io::Result<Received> {
    let mut control = FdControlBuffer {
        _align: [],
        bytes: [0; 64],
    };
    let mut iov = libc::iovec {
        iov_base: buffer.as_mut_ptr().cast(),
        iov_len: buffer.len(),
    };
    // SAFETY: an all-zero msghdr is a valid empty header.
    let mut header: libc::msghdr = unsafe { MaybeUninit::zeroed().assume_init() };
    header.msg_iov = &mut iov;
    header.msg_iovlen = 1;
    header.msg_control = control.bytes.as_mut_ptr().cast();
    header.msg_controllen = fd_control_space(MAX_FDS_PER_MESSAGE) as _;
    let len = loop {
        // SAFETY: header, iov, buffer and control all outlive the call.
        let got = unsafe {
            libc::recvmsg(
                socket.as_raw_fd(),
                &mut header,
                libc::MSG_CMSG_CLOEXEC | flags,
            )
        };
        if got >= 0 {
            break got as usize;
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    };
    // SAFETY: the kernel filled `header` and `control`; CMSG_FIRSTHDR/NXTHDR walk only the
    // `msg_controllen` bytes it reported, and SCM_RIGHTS data holds that many descriptors,
    // each now open in this process and owned by us.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&header);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data_len = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                for i in 0..data_len / size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&header, cmsg);
        }
    }
    let truncated = header.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0;
    Ok(Received { len, truncated })
}

/// Waits until `fd` is readable (or hung up), at most `timeout`. False on timeout.
pub(crate) fn wait_readable(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let millis = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    let timeout = PollTimeout::try_from(millis).unwrap_or(PollTimeout::MAX);
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    loop {
        match poll(&mut fds, timeout) {
            Ok(0) => return Ok(false),
            Ok(_) => return Ok(true),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(errno) => return Err(errno.into()),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;

    #[test]
    fn descriptors_travel_with_the_message_and_arrive_close_on_exec() {
        let (engine, spawner) = control_socket_pair().unwrap();
        let (read_end, write_end) = cloexec_pipe().unwrap();
        send_with_fds(
            engine.as_fd(),
            b"hello",
            &[write_end.as_fd()],
            SendMode::Wait,
        )
        .unwrap();
        drop(write_end);
        let mut buffer = [0u8; 16];
        let mut fds = Vec::new();
        let got = recv_with_fds(spawner.as_fd(), &mut buffer, &mut fds).unwrap();
        assert_eq!((&buffer[..got.len], got.truncated), (&b"hello"[..], false));
        assert_eq!(fds.len(), 1);
        // SAFETY (test): F_GETFD on an open descriptor.
        let flags = unsafe { libc::fcntl(fds[0].as_raw_fd(), libc::F_GETFD) };
        assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
        std::fs::File::from(fds.pop().unwrap())
            .write_all(b"through")
            .unwrap();
        let mut text = String::new();
        std::fs::File::from(read_end)
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "through");
    }

    #[test]
    fn a_closed_peer_reads_as_an_empty_message_and_refuses_sends() {
        let (engine, spawner) = control_socket_pair().unwrap();
        drop(engine);
        let mut fds = Vec::new();
        let got = recv_with_fds(spawner.as_fd(), &mut [0u8; 8], &mut fds).unwrap();
        assert_eq!(got.len, 0);
        let error = send_with_fds(spawner.as_fd(), b"x", &[], SendMode::Wait).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EPIPE));
        assert_eq!(socket_type(spawner.as_fd()).unwrap(), libc::SOCK_SEQPACKET);
    }

    #[test]
    fn too_long_a_message_is_reported_truncated() {
        let (engine, spawner) = control_socket_pair().unwrap();
        send_with_fds(engine.as_fd(), &[7u8; 100], &[], SendMode::Wait).unwrap();
        let mut fds = Vec::new();
        let got = recv_with_fds(spawner.as_fd(), &mut [0u8; 10], &mut fds).unwrap();
        assert!(got.truncated);
    }
}
