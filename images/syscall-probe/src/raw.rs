//! The raw system calls. Every call passes only integers, null pointers, or a pointer to a
//! local buffer of the size the kernel reads or writes; a returned descriptor is closed at once.
#![allow(unsafe_code)]

use crate::{Outcome, Probe};

/// `sizeof(struct io_uring_params)`.
const IO_URING_PARAMS_BYTES: usize = 120;
const PTRACE_PEEKDATA: libc::c_long = 2;
const BPF_MAP_CREATE: libc::c_long = 0;
const KEYCTL_GET_KEYRING_ID: libc::c_long = 0;
const KEY_SPEC_SESSION_KEYRING: libc::c_long = -3;

fn outcome(ret: libc::c_long, is_fd: bool) -> Outcome {
    if ret < 0 {
        return Outcome::Failed(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    if is_fd && let Ok(fd) = libc::c_int::try_from(ret) {
        // SAFETY: `fd` was just returned by the kernel to this thread and is owned by no one
        // else; closing it once is sound.
        unsafe {
            libc::close(fd);
        }
    }
    Outcome::Succeeded
}

pub(crate) fn attempt(probe: Probe) -> Outcome {
    match probe {
        Probe::IoUringSetup => {
            let mut params = [0_u8; IO_URING_PARAMS_BYTES];
            // SAFETY: `params` is a writable buffer of exactly `sizeof(struct io_uring_params)`
            // bytes that outlives the call; the kernel reads and writes only within it.
            let ret =
                unsafe { libc::syscall(libc::SYS_io_uring_setup, 1_u32, params.as_mut_ptr()) };
            outcome(ret, true)
        }
        Probe::SocketVsock => {
            // SAFETY: integer arguments only.
            let ret =
                unsafe { libc::socket(libc::AF_VSOCK, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
            outcome(libc::c_long::from(ret), true)
        }
        Probe::Ptrace => {
            // SAFETY: integer arguments only; PEEKDATA on a process this one does not trace
            // fails with ESRCH and changes nothing.
            let ret = unsafe { libc::syscall(libc::SYS_ptrace, PTRACE_PEEKDATA, 1, 0, 0) };
            outcome(ret, false)
        }
        Probe::PerfEventOpen => {
            // SAFETY: a null attribute pointer is rejected by the kernel (EFAULT) before use.
            let ret = unsafe {
                libc::syscall(
                    libc::SYS_perf_event_open,
                    std::ptr::null::<u8>(),
                    0,
                    -1,
                    -1,
                    0,
                )
            };
            outcome(ret, true)
        }
        Probe::Bpf => {
            // SAFETY: a null attribute pointer with size 0: the kernel reads nothing.
            let ret =
                unsafe { libc::syscall(libc::SYS_bpf, BPF_MAP_CREATE, std::ptr::null::<u8>(), 0) };
            outcome(ret, true)
        }
        Probe::Userfaultfd => {
            // SAFETY: integer arguments only.
            let ret = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC) };
            outcome(ret, true)
        }
        Probe::Keyctl => {
            // SAFETY: integer arguments only; the call is a query (create = 0).
            let ret = unsafe {
                libc::syscall(
                    libc::SYS_keyctl,
                    KEYCTL_GET_KEYRING_ID,
                    KEY_SPEC_SESSION_KEYRING,
                    0,
                )
            };
            outcome(ret, false)
        }
        Probe::InitModule => {
            // SAFETY: null image and parameters with length 0: the kernel reads nothing.
            let ret = unsafe {
                libc::syscall(
                    libc::SYS_init_module,
                    std::ptr::null::<u8>(),
                    0,
                    std::ptr::null::<u8>(),
                )
            };
            outcome(ret, false)
        }
        Probe::Mount => {
            // SAFETY: all pointers null: the kernel refuses (EPERM/EFAULT) before reading.
            let ret = unsafe {
                libc::syscall(
                    libc::SYS_mount,
                    std::ptr::null::<u8>(),
                    std::ptr::null::<u8>(),
                    std::ptr::null::<u8>(),
                    0,
                    std::ptr::null::<u8>(),
                )
            };
            outcome(ret, false)
        }
    }
}
