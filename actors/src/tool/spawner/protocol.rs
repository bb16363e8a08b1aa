//! tool::spawner::protocol — the messages on the control socket between the engine and its
//! tool spawner, as bytes.
//!
//! Engine → spawner: one `Spawn` request per tool, carrying the pipe ends the tool gets as
//! descriptors (`SCM_RIGHTS`, in this order: stdin when piped, stdout, stderr, then a memfd
//! holding the launch spec when it is too big to travel inline).
//! Spawner → engine: `Ready` once at start (alone in its message), then `Spawned` or
//! `Failed` per request (in request order) and `Exited` per tool leader it reaped. A leader's
//! `Spawned` always comes before its `Exited`. One message carries up to
//! [`REPLIES_PER_MESSAGE`] replies back to back: under load the spawner answers the requests
//! already queued together, and the engine's reader wakes once for them, not once each.
//!
//! Owns: the byte layout (little-endian, fixed headers, length-prefixed strings each followed
//! by a NUL so the spawner can hand them to `execve` without copying).
//! Must not: do I/O.

use std::ffi::CStr;

/// Bumped on any change of the layout; the engine refuses a spawner that answers another.
pub const PROTOCOL_VERSION: u32 = 3;
/// A launch spec up to this size travels inside the request; a bigger one in a memfd.
pub const INLINE_SPEC_MAX: usize = 48 * 1024;
/// The largest launch spec the spawner reads from a memfd (well above the kernel's limit on
/// argv + environment, which `execve` enforces anyway).
pub const MEMFD_SPEC_MAX: usize = 64 * 1024 * 1024;
/// Room the spawner needs to receive any request.
pub const REQUEST_BUFFER: usize = REQUEST_HEADER + INLINE_SPEC_MAX;
/// The most replies one message carries. Bounded because the first reply of a message waits
/// for the spawns after it (≈ 0.3 ms each): 16 keep that under ≈ 5 ms in a burst, and more
/// saved nothing measurable (BENCHMARKS.md, issue 14's fifth pass).
pub const REPLIES_PER_MESSAGE: usize = 16;
/// The longest reply.
const REPLY_MAX: usize = 14;
/// Room the engine needs to receive any message of replies.
pub const REPLY_BUFFER: usize = REPLIES_PER_MESSAGE * REPLY_MAX;

const KIND_SPAWN: u8 = 1;
const KIND_READY: u8 = 0x10;
const KIND_SPAWNED: u8 = 0x11;
const KIND_FAILED: u8 = 0x12;
const KIND_EXITED: u8 = 0x13;

const FLAG_STDIN_PIPE: u8 = 1;
const FLAG_SPEC_IN_MEMFD: u8 = 2;

/// kind (1) + request id (8) + flags (1).
const REQUEST_HEADER: usize = 10;

/// The fixed part of a spawn request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    pub id: u64,
    /// A stdin pipe end is attached (else the tool's stdin is /dev/null).
    pub stdin_pipe: bool,
    /// The launch spec is in an attached memfd, not after the header.
    pub spec_in_memfd: bool,
}

impl RequestHeader {
    /// Descriptors that must come with this request.
    pub fn expected_fds(&self) -> usize {
        2 + usize::from(self.stdin_pipe) + usize::from(self.spec_in_memfd)
    }
}

/// A request's header followed by `spec` when it is inline (empty when in a memfd).
pub fn encode_request(header: RequestHeader, inline_spec: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(REQUEST_HEADER + inline_spec.len());
    out.push(KIND_SPAWN);
    out.extend_from_slice(&header.id.to_le_bytes());
    let mut flags = 0;
    if header.stdin_pipe {
        flags |= FLAG_STDIN_PIPE;
    }
    if header.spec_in_memfd {
        flags |= FLAG_SPEC_IN_MEMFD;
    }
    out.push(flags);
    out.extend_from_slice(inline_spec);
    out
}

/// The header and the inline spec bytes of a request.
pub fn decode_request(message: &[u8]) -> Result<(RequestHeader, &[u8]), ProtocolError> {
    if message.len() < REQUEST_HEADER || message[0] != KIND_SPAWN {
        return Err(ProtocolError("not a spawn request"));
    }
    let id = u64::from_le_bytes(fixed(&message[1..9])?);
    let flags = message[9];
    let header = RequestHeader {
        id,
        stdin_pipe: flags & FLAG_STDIN_PIPE != 0,
        spec_in_memfd: flags & FLAG_SPEC_IN_MEMFD != 0,
    };
    Ok((header, &message[REQUEST_HEADER..]))
}

/// The request id of a message too damaged to decode, when its header survived.
pub fn request_id(message: &[u8]) -> Option<u64> {
    (message.len() >= 9 && message[0] == KIND_SPAWN)
        .then(|| fixed(&message[1..9]).ok().map(u64::from_le_bytes))
        .flatten()
}

const SANDBOX_CONFINE_WRITES: u8 = 1;
const SANDBOX_NETWORK_OFF: u8 = 2;
const SANDBOX_SECCOMP: u8 = 4;
const SANDBOX_MOUNTS: u8 = 8;

/// The sandbox a request asks for (`crate::sandbox`), as the spawner reads it: the layers to
/// apply and the paths they use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireSandbox<'a> {
    /// Writes are confined to `writable`.
    pub confine_writes: bool,
    /// No sockets.
    pub network_off: bool,
    /// The Landlock ABI to use (0: none).
    pub landlock_abi: u32,
    /// Install the seccomp filter.
    pub seccomp: bool,
    /// A private mount namespace hiding `hidden`.
    pub mounts: bool,
    /// Where the tool may write.
    pub writable: Vec<&'a CStr>,
    /// What it must not see.
    pub hidden: Vec<&'a CStr>,
}

/// The sandbox of a request as the engine encodes it (paths as bytes, without NULs).
#[derive(Debug, Clone, Copy)]
pub struct SandboxFields<'a> {
    /// See [`WireSandbox`].
    pub confine_writes: bool,
    /// See [`WireSandbox`].
    pub network_off: bool,
    /// See [`WireSandbox`].
    pub landlock_abi: u32,
    /// See [`WireSandbox`].
    pub seccomp: bool,
    /// See [`WireSandbox`].
    pub mounts: bool,
    /// See [`WireSandbox`].
    pub writable: &'a [&'a [u8]],
    /// See [`WireSandbox`].
    pub hidden: &'a [&'a [u8]],
}

/// What the spawner starts: the resolved program, argv (including `argv[0]`), the complete
/// environment as `NAME=value`, the working directory, and its sandbox if any. No string may
/// contain a NUL (the engine checks before encoding).
pub fn encode_spec<'a>(
    program: &[u8],
    argv: impl ExactSizeIterator<Item = &'a [u8]> + Clone,
    env: impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
    cwd: &[u8],
    sandbox: Option<SandboxFields<'_>>,
) -> Vec<u8> {
    let sandbox_size = sandbox.map_or(0, |s| {
        16 + s
            .writable
            .iter()
            .chain(s.hidden)
            .map(|p| p.len() + 5)
            .sum::<usize>()
    });
    let size = 17
        + sandbox_size
        + program.len()
        + cwd.len()
        + argv.clone().map(|a| a.len() + 5).sum::<usize>()
        + env
            .clone()
            .map(|(k, v)| k.len() + v.len() + 6)
            .sum::<usize>();
    let mut out = Vec::with_capacity(size);
    put_str(&mut out, &[program]);
    out.extend_from_slice(&(argv.len() as u32).to_le_bytes());
    for arg in argv {
        put_str(&mut out, &[arg]);
    }
    let count_at = out.len();
    out.extend_from_slice(&0u32.to_le_bytes());
    let mut count: u32 = 0;
    for (name, value) in env {
        put_str(&mut out, &[name, b"=", value]);
        count += 1;
    }
    out[count_at..count_at + 4].copy_from_slice(&count.to_le_bytes());
    put_str(&mut out, &[cwd]);
    match sandbox {
        None => out.push(0),
        Some(sandbox) => {
            out.push(1);
            let mut flags = 0;
            for (set, bit) in [
                (sandbox.confine_writes, SANDBOX_CONFINE_WRITES),
                (sandbox.network_off, SANDBOX_NETWORK_OFF),
                (sandbox.seccomp, SANDBOX_SECCOMP),
                (sandbox.mounts, SANDBOX_MOUNTS),
            ] {
                if set {
                    flags |= bit;
                }
            }
            out.push(flags);
            out.extend_from_slice(&sandbox.landlock_abi.to_le_bytes());
            for list in [sandbox.writable, sandbox.hidden] {
                out.extend_from_slice(&(list.len() as u32).to_le_bytes());
                for path in list {
                    put_str(&mut out, &[path]);
                }
            }
        }
    }
    out
}

/// A launch spec read back, borrowing the strings from the message.
#[derive(Debug, PartialEq, Eq)]
pub struct Spec<'a> {
    pub program: &'a CStr,
    pub argv: Vec<&'a CStr>,
    pub env: Vec<&'a CStr>,
    pub cwd: &'a CStr,
    /// Confine the tool before `exec`.
    pub sandbox: Option<WireSandbox<'a>>,
}

/// Reads a spec written by [`encode_spec`].
pub fn decode_spec(bytes: &[u8]) -> Result<Spec<'_>, ProtocolError> {
    let mut reader = Reader { bytes, at: 0 };
    let program = reader.string()?;
    let argv = reader.strings()?;
    let env = reader.strings()?;
    let cwd = reader.string()?;
    let sandbox = match reader.byte()? {
        0 => None,
        1 => {
            let flags = reader.byte()?;
            let landlock_abi = reader.u32()? as u32;
            Some(WireSandbox {
                confine_writes: flags & SANDBOX_CONFINE_WRITES != 0,
                network_off: flags & SANDBOX_NETWORK_OFF != 0,
                seccomp: flags & SANDBOX_SECCOMP != 0,
                mounts: flags & SANDBOX_MOUNTS != 0,
                landlock_abi,
                writable: reader.strings()?,
                hidden: reader.strings()?,
            })
        }
        _ => return Err(ProtocolError("bad sandbox marker in the launch spec")),
    };
    if reader.at != bytes.len() {
        return Err(ProtocolError("trailing bytes after the launch spec"));
    }
    if argv.is_empty() {
        return Err(ProtocolError("empty argv"));
    }
    Ok(Spec {
        program,
        argv,
        env,
        cwd,
        sandbox,
    })
}

/// Spawner → engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// The spawner runs and speaks `version`; `pid` is its own process id.
    Ready { version: u32, pid: u32 },
    /// Request `id` started process `pid` (the leader of its own new process group).
    Spawned { id: u64, pid: u32 },
    /// Request `id` could not start: `errno` as `posix_spawn` reported it (`step` 0), or
    /// as the sandbox step numbered `step` (`crate::sandbox::Step`) failed in the child.
    Failed { id: u64, errno: i32, step: u8 },
    /// Leader `pid` was reaped with this raw wait status.
    Exited { pid: u32, status: i32 },
}

impl Reply {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(REPLY_MAX);
        self.encode_into(&mut out);
        out
    }

    /// Appends the reply's bytes to `out` (a message of several replies is their
    /// concatenation).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        match *self {
            Reply::Ready { version, pid } => {
                out.push(KIND_READY);
                out.extend_from_slice(&version.to_le_bytes());
                out.extend_from_slice(&pid.to_le_bytes());
            }
            Reply::Spawned { id, pid } => {
                out.push(KIND_SPAWNED);
                out.extend_from_slice(&id.to_le_bytes());
                out.extend_from_slice(&pid.to_le_bytes());
            }
            Reply::Failed { id, errno, step } => {
                out.push(KIND_FAILED);
                out.extend_from_slice(&id.to_le_bytes());
                out.extend_from_slice(&errno.to_le_bytes());
                out.push(step);
            }
            Reply::Exited { pid, status } => {
                out.push(KIND_EXITED);
                out.extend_from_slice(&pid.to_le_bytes());
                out.extend_from_slice(&status.to_le_bytes());
            }
        }
    }

    /// The one reply `message` holds.
    pub fn decode(message: &[u8]) -> Result<Reply, ProtocolError> {
        let (reply, used) = Reply::decode_first(message)?;
        if used != message.len() {
            return Err(ProtocolError("reply of the wrong length"));
        }
        Ok(reply)
    }

    /// Every reply of a message, in order; an error if any part does not decode.
    pub fn decode_all(mut message: &[u8]) -> Result<Vec<Reply>, ProtocolError> {
        let mut replies = Vec::with_capacity(message.len() / 9);
        while !message.is_empty() {
            let (reply, used) = Reply::decode_first(message)?;
            replies.push(reply);
            message = &message[used..];
        }
        Ok(replies)
    }

    /// The reply at the start of `message` and how many bytes it took.
    fn decode_first(message: &[u8]) -> Result<(Reply, usize), ProtocolError> {
        let (&kind, rest) = message.split_first().ok_or(ProtocolError("empty reply"))?;
        let u32_at = |at: usize| fixed(rest.get(at..at + 4).unwrap_or(&[])).map(u32::from_le_bytes);
        let i32_at = |at: usize| fixed(rest.get(at..at + 4).unwrap_or(&[])).map(i32::from_le_bytes);
        let id = || fixed(rest.get(0..8).unwrap_or(&[])).map(u64::from_le_bytes);
        let (reply, len) = match kind {
            KIND_READY => (
                Reply::Ready {
                    version: u32_at(0)?,
                    pid: u32_at(4)?,
                },
                8,
            ),
            KIND_SPAWNED => (
                Reply::Spawned {
                    id: id()?,
                    pid: u32_at(8)?,
                },
                12,
            ),
            KIND_FAILED => (
                Reply::Failed {
                    id: id()?,
                    errno: i32_at(8)?,
                    step: *rest.get(12).ok_or(ProtocolError("message too short"))?,
                },
                13,
            ),
            KIND_EXITED => (
                Reply::Exited {
                    pid: u32_at(0)?,
                    status: i32_at(4)?,
                },
                8,
            ),
            _ => return Err(ProtocolError("unknown reply kind")),
        };
        if rest.len() < len {
            return Err(ProtocolError("reply of the wrong length"));
        }
        Ok((reply, 1 + len))
    }
}

/// A message that does not follow the layout (a bug or a version mismatch, never user input).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("tool spawner protocol: {0}")]
pub struct ProtocolError(pub &'static str);

fn fixed<const N: usize>(bytes: &[u8]) -> Result<[u8; N], ProtocolError> {
    bytes
        .try_into()
        .map_err(|_| ProtocolError("message too short"))
}

/// Length (u32, excluding the NUL) + the parts + NUL.
fn put_str(out: &mut Vec<u8>, parts: &[&[u8]]) {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    out.extend_from_slice(&(len as u32).to_le_bytes());
    for part in parts {
        out.extend_from_slice(part);
    }
    out.push(0);
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Result<u8, ProtocolError> {
        let byte = *self
            .bytes
            .get(self.at)
            .ok_or(ProtocolError("message too short"))?;
        self.at += 1;
        Ok(byte)
    }

    fn u32(&mut self) -> Result<usize, ProtocolError> {
        let raw = fixed(self.bytes.get(self.at..self.at + 4).unwrap_or(&[]))?;
        self.at += 4;
        Ok(u32::from_le_bytes(raw) as usize)
    }

    fn string(&mut self) -> Result<&'a CStr, ProtocolError> {
        let len = self.u32()?;
        let end = self
            .at
            .checked_add(len + 1)
            .filter(|end| *end <= self.bytes.len())
            .ok_or(ProtocolError("string runs past the message"))?;
        let text = CStr::from_bytes_with_nul(&self.bytes[self.at..end])
            .map_err(|_| ProtocolError("string with a NUL inside or no NUL at its end"))?;
        self.at = end;
        Ok(text)
    }

    fn strings(&mut self) -> Result<Vec<&'a CStr>, ProtocolError> {
        let count = self.u32()?;
        // Every string takes at least 5 bytes: a count beyond that is a damaged message.
        if count > (self.bytes.len() - self.at) / 5 {
            return Err(ProtocolError("string count runs past the message"));
        }
        (0..count).map(|_| self.string()).collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn spec_bytes() -> Vec<u8> {
        let argv: Vec<&[u8]> = vec![b"sh", b"-c", b"echo $X"];
        let env: Vec<(&[u8], &[u8])> = vec![(b"X", b"1"), (b"PATH", b"/bin:/usr/bin")];
        encode_spec(b"/bin/sh", argv.into_iter(), env.into_iter(), b"/tmp", None)
    }

    #[test]
    fn a_sandbox_round_trips_and_its_truncations_are_refused() {
        let argv: Vec<&[u8]> = vec![b"true"];
        let writable: [&[u8]; 2] = [b"/ws", b"/tmp/x"];
        let hidden: [&[u8]; 1] = [b"/root/.ssh"];
        let bytes = encode_spec(
            b"/bin/true",
            argv.into_iter(),
            std::iter::empty(),
            b"/ws",
            Some(SandboxFields {
                confine_writes: true,
                network_off: true,
                landlock_abi: 7,
                seccomp: true,
                mounts: false,
                writable: &writable,
                hidden: &hidden,
            }),
        );
        let sandbox = decode_spec(&bytes).unwrap().sandbox.unwrap();
        assert!(sandbox.confine_writes && sandbox.network_off && sandbox.seccomp);
        assert!(!sandbox.mounts);
        assert_eq!(sandbox.landlock_abi, 7);
        let paths = |list: &[&CStr]| {
            list.iter()
                .map(|p| p.to_bytes().to_vec())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            paths(&sandbox.writable),
            vec![b"/ws".to_vec(), b"/tmp/x".to_vec()]
        );
        assert_eq!(paths(&sandbox.hidden), vec![b"/root/.ssh".to_vec()]);
        for cut in 0..bytes.len() {
            assert!(decode_spec(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn a_spec_round_trips_with_env_as_name_equals_value() {
        let bytes = spec_bytes();
        let spec = decode_spec(&bytes).unwrap();
        assert_eq!(spec.program.to_bytes(), b"/bin/sh");
        let argv: Vec<&[u8]> = spec.argv.iter().map(|a| a.to_bytes()).collect();
        assert_eq!(argv, vec![&b"sh"[..], b"-c", b"echo $X"]);
        let env: Vec<&[u8]> = spec.env.iter().map(|a| a.to_bytes()).collect();
        assert_eq!(env, vec![&b"X=1"[..], b"PATH=/bin:/usr/bin"]);
        assert_eq!(spec.cwd.to_bytes(), b"/tmp");
    }

    #[test]
    fn every_truncation_of_a_spec_is_refused_not_misread() {
        let bytes = spec_bytes();
        for cut in 0..bytes.len() {
            assert!(decode_spec(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode_spec(&longer).is_err());
    }

    #[test]
    fn a_huge_string_count_is_refused_without_allocating_for_it() {
        let mut bytes = Vec::new();
        put_str(&mut bytes, &[b"/bin/true"]);
        bytes.extend_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            decode_spec(&bytes),
            Err(ProtocolError("string count runs past the message"))
        );
    }

    #[test]
    fn request_headers_round_trip() {
        for (stdin_pipe, spec_in_memfd) in [(false, false), (true, false), (true, true)] {
            let header = RequestHeader {
                id: 0x0102_0304_0506_0708,
                stdin_pipe,
                spec_in_memfd,
            };
            let message = encode_request(header, b"spec");
            assert_eq!(decode_request(&message).unwrap(), (header, &b"spec"[..]));
            assert_eq!(request_id(&message), Some(header.id));
        }
        assert!(decode_request(&[KIND_SPAWN, 1, 2]).is_err());
        assert_eq!(request_id(&[KIND_READY; 12]), None);
    }

    #[test]
    fn replies_round_trip_and_wrong_lengths_are_refused() {
        let replies = [
            Reply::Ready {
                version: 1,
                pid: 42,
            },
            Reply::Spawned { id: 7, pid: 1234 },
            Reply::Failed {
                id: 8,
                errno: 2,
                step: 9,
            },
            Reply::Exited {
                pid: 1234,
                status: 9,
            },
        ];
        for reply in replies {
            let bytes = reply.encode();
            assert!(bytes.len() <= REPLY_BUFFER);
            assert_eq!(Reply::decode(&bytes), Ok(reply));
            assert!(Reply::decode(&bytes[..bytes.len() - 1]).is_err());
        }
        assert!(Reply::decode(&[]).is_err());
        assert!(Reply::decode(&[0x7f, 0, 0]).is_err());
        // A message of several replies decodes to all of them; one reply too long is refused
        // as a single reply, and a message cut inside a reply is refused whole.
        let mut message = Vec::new();
        for reply in replies.iter().cycle().take(REPLIES_PER_MESSAGE) {
            reply.encode_into(&mut message);
        }
        assert!(message.len() <= REPLY_BUFFER);
        let decoded = Reply::decode_all(&message).unwrap();
        assert_eq!(decoded.len(), REPLIES_PER_MESSAGE);
        assert_eq!(decoded[..4], replies);
        assert!(Reply::decode(&message).is_err());
        assert!(Reply::decode_all(&message[..message.len() - 1]).is_err());
    }
}
