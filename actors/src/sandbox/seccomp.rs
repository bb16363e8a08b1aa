//! sandbox::seccomp — the system-call filter of a sandboxed tool, a hand-written classic BPF
//! program (no crate: a dozen instructions).
//!
//! Always denied (EPERM): `io_uring_*` (it opens sockets and files without the system calls
//! below ever being made) and `open_by_handle_at` / `name_to_handle_at` (they reach a file by
//! its handle, past the mounts that hide `deny_read` paths). With the network off: `socket`
//! for every family (TCP, UDP — so no DNS —, Unix sockets to local daemons, netlink) and
//! `socketpair` for anything but `AF_UNIX` (a pair reaches nothing outside the tool). A
//! system call of a foreign ABI (32-bit, x32) gets ENOSYS: the filter only knows this one's
//! numbers.
//! Owns: the program and its installation.
//! Must not: allocate or lock in [`install`] (it runs between fork and exec).

use std::sync::OnceLock;

use libc::sock_filter;

#[cfg(target_arch = "x86_64")]
const NATIVE_ARCH: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
#[cfg(target_arch = "aarch64")]
const NATIVE_ARCH: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64
/// x32 system calls share x86_64's audit arch with this bit set in the number.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

const BPF_LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const BPF_JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
#[cfg(target_arch = "x86_64")]
const BPF_JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const BPF_RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

/// Offsets in `struct seccomp_data`.
const NR_OFFSET: u32 = 0;
const ARCH_OFFSET: u32 = 4;
/// The low 32 bits of the first argument (little-endian).
const ARG0_OFFSET: u32 = 16;

const RET_ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
const RET_EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
const RET_ENOSYS: u32 = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;

/// Where a jump of the program goes.
#[derive(Clone, Copy)]
enum Target {
    Next,
    Eperm,
    Enosys,
    CheckPair,
}

enum Op {
    Load(u32),
    Jeq(u32, Target, Target),
    #[cfg(target_arch = "x86_64")]
    Jge(u32, Target, Target),
}

/// The system calls denied to every sandboxed tool.
const ALWAYS_DENIED: [libc::c_long; 5] = [
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
];

/// Whether filters can be installed here (and this architecture is one delta knows).
pub fn available() -> bool {
    if !cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
        return false;
    }
    let action = libc::SECCOMP_RET_ERRNO;
    // SAFETY: GET_ACTION_AVAIL reads one u32 from a valid pointer.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_GET_ACTION_AVAIL,
            0u32,
            &action as *const u32,
        )
    };
    rc == 0
}

/// The program for a tool with the network off or on, built once per process.
pub fn program(network_off: bool) -> &'static [sock_filter] {
    static OFF: OnceLock<Vec<sock_filter>> = OnceLock::new();
    static ON: OnceLock<Vec<sock_filter>> = OnceLock::new();
    let slot = if network_off { &OFF } else { &ON };
    slot.get_or_init(|| build(network_off))
}

fn build(network_off: bool) -> Vec<sock_filter> {
    let mut ops = vec![
        Op::Load(ARCH_OFFSET),
        Op::Jeq(NATIVE_ARCH, Target::Next, Target::Enosys),
        Op::Load(NR_OFFSET),
    ];
    #[cfg(target_arch = "x86_64")]
    ops.push(Op::Jge(X32_SYSCALL_BIT, Target::Enosys, Target::Next));
    for nr in ALWAYS_DENIED {
        ops.push(Op::Jeq(nr as u32, Target::Eperm, Target::Next));
    }
    if network_off {
        ops.push(Op::Jeq(
            libc::SYS_socket as u32,
            Target::Eperm,
            Target::Next,
        ));
        ops.push(Op::Jeq(
            libc::SYS_socketpair as u32,
            Target::CheckPair,
            Target::Next,
        ));
    }
    // The tail (the last body instruction falls through to it): allow; the socketpair
    // check (load, compare, allow); EPERM; ENOSYS.
    let body = ops.len();
    let at = |target: Target, from: usize| -> u8 {
        let index = match target {
            Target::Next => from + 1,
            Target::CheckPair => body + 1,
            Target::Eperm => body + 4,
            Target::Enosys => body + 5,
        };
        // Forward jumps over a program of a few dozen instructions always fit.
        u8::try_from(index - from - 1).unwrap_or(u8::MAX)
    };
    let mut program: Vec<sock_filter> = ops
        .iter()
        .enumerate()
        .map(|(i, op)| match *op {
            Op::Load(offset) => statement(BPF_LD_W_ABS, offset),
            Op::Jeq(k, yes, no) => jump(BPF_JEQ_K, k, at(yes, i), at(no, i)),
            #[cfg(target_arch = "x86_64")]
            Op::Jge(k, yes, no) => jump(BPF_JGE_K, k, at(yes, i), at(no, i)),
        })
        .collect();
    program.push(statement(BPF_RET_K, RET_ALLOW));
    program.push(statement(BPF_LD_W_ABS, ARG0_OFFSET));
    program.push(jump(BPF_JEQ_K, libc::AF_UNIX as u32, 0, 1));
    program.push(statement(BPF_RET_K, RET_ALLOW));
    program.push(statement(BPF_RET_K, RET_EPERM));
    program.push(statement(BPF_RET_K, RET_ENOSYS));
    program
}

#[cfg(test)]
fn is_jge(code: u16) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        code == BPF_JGE_K
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = code;
        false
    }
}

fn statement(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// Installs `program` on the calling thread (inherited by everything it starts).
/// Async-signal-safe: one system call. Needs `no_new_privs`.
///
/// # Safety
/// `program` must stay valid for the call (a `'static` program does).
pub unsafe fn install(program: &[sock_filter]) -> libc::c_long {
    let fprog = libc::sock_fprog {
        len: program.len() as libc::c_ushort,
        filter: program.as_ptr().cast_mut(),
    };
    libc::syscall(
        libc::SYS_seccomp,
        libc::SECCOMP_SET_MODE_FILTER,
        0u32,
        &fprog as *const libc::sock_fprog,
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// A small interpreter of the instructions the program uses, over one `seccomp_data`.
    fn verdict(program: &[sock_filter], arch: u32, nr: u32, arg0: u32) -> u32 {
        let mut accumulator = 0u32;
        let mut pc = 0usize;
        loop {
            let insn = program[pc];
            match insn.code {
                BPF_LD_W_ABS => {
                    accumulator = match insn.k {
                        NR_OFFSET => nr,
                        ARCH_OFFSET => arch,
                        ARG0_OFFSET => arg0,
                        other => panic!("load of offset {other}"),
                    };
                    pc += 1;
                }
                BPF_RET_K => return insn.k,
                code => {
                    let taken = if code == BPF_JEQ_K {
                        accumulator == insn.k
                    } else {
                        assert!(is_jge(code), "unknown instruction {code:#x}");
                        accumulator >= insn.k
                    };
                    pc += 1 + usize::from(if taken { insn.jt } else { insn.jf });
                }
            }
        }
    }

    #[test]
    fn the_network_switch_denies_sockets_and_keeps_unix_pairs() {
        let off = program(true);
        let on = program(false);
        let socket = libc::SYS_socket as u32;
        let pair = libc::SYS_socketpair as u32;
        let inet = libc::AF_INET as u32;
        let unix = libc::AF_UNIX as u32;
        assert_eq!(verdict(off, NATIVE_ARCH, socket, inet), RET_EPERM);
        assert_eq!(verdict(off, NATIVE_ARCH, socket, unix), RET_EPERM);
        assert_eq!(verdict(off, NATIVE_ARCH, pair, unix), RET_ALLOW);
        assert_eq!(verdict(off, NATIVE_ARCH, pair, inet), RET_EPERM);
        assert_eq!(verdict(on, NATIVE_ARCH, socket, inet), RET_ALLOW);
        assert_eq!(verdict(on, NATIVE_ARCH, pair, inet), RET_ALLOW);
        for program in [off, on] {
            let read = libc::SYS_read as u32;
            assert_eq!(verdict(program, NATIVE_ARCH, read, 0), RET_ALLOW);
            for nr in ALWAYS_DENIED {
                assert_eq!(verdict(program, NATIVE_ARCH, nr as u32, 0), RET_EPERM);
            }
            assert_eq!(verdict(program, 0x4000_0003, read, 0), RET_ENOSYS, "i386");
            #[cfg(target_arch = "x86_64")]
            assert_eq!(
                verdict(program, NATIVE_ARCH, X32_SYSCALL_BIT | read, 0),
                RET_ENOSYS,
                "x32"
            );
        }
    }
}
