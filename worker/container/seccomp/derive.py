#!/usr/bin/env python3
"""Derives the turn seccomp profile (turn.json) from Docker's default profile.

Input: docker-default-v20.10.24.json, byte for byte moby/moby's profiles/seccomp/default.json at
tag v20.10.24 (commit 5d6db842238e3c4f5f9fb9ad70ea46b35227d084), the profile of the Docker 20.10
daemons the worker supports. Output: turn.json, the profile every turn and gate runs under with
runc, and turn-runsc.json, the same profile for gVisor's runsc (see below).

The turn profile is the default minus what a coding turn never needs (and what widened the
sandbox: finding 13 of the hardening review):

* io_uring (io_uring_setup/enter/register): denied with ENOSYS, so runtimes fall back to epoll;
* socket families: socket() only for AF_UNIX, AF_INET and AF_INET6 (argument 0 filtered), so
  AF_VSOCK, AF_NETLINK, AF_PACKET and the rest fail with EPERM; socketpair() only for AF_UNIX;
  socketcall (the 32-bit multiplexer, which cannot be argument-filtered) is removed;
* ptrace, perf_event_open, bpf, userfaultfd, keyctl/add_key/request_key;
* every group the default grants only with a capability (turns drop them all), which removes
  the kernel module, mount/umount/pivot_root, namespace, accounting, clock, reboot, quota and
  process_vm_* calls even if a capability were ever added by mistake.

The runsc profile differs in one rule only: `clone3` is allowed instead of failing with ENOSYS.
gVisor's seccomp (runsc --oci-seccomp, checked with Debian's 20221219 and 20240729 releases)
ignores `errnoRet` and fails a denied call with EPERM, so glibc does not fall back to `clone` and
every thread creation fails (Node aborts at start). Under gVisor `clone3` reaches the sandbox's
own kernel, never the host's: the 20221219 sentry answers ENOSYS itself (glibc then uses
`clone`, which the filter still checks for namespace flags), and a sentry that implements it
keeps any namespace it creates inside the sandbox.

Run `python3 worker/container/seccomp/derive.py` after changing this script (with a directory
argument it writes both files there instead); a unit test checks that both files are exactly what
this script writes.
"""
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
SOURCE = HERE / "docker-default-v20.10.24.json"

DENIED = {
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "socket", "socketcall", "socketpair",
    "ptrace", "perf_event_open", "bpf", "userfaultfd",
    "keyctl", "add_key", "request_key",
    "init_module", "finit_module", "delete_module",
    "mount", "umount", "umount2", "pivot_root", "move_mount", "fsmount", "fsopen", "fspick",
    "open_tree", "mount_setattr",
}

AF_UNIX, AF_INET, AF_INET6 = 1, 2, 10
ENOSYS = 38


def rule(names, action="SCMP_ACT_ALLOW", args=None, comment="", errno=None):
    out = {"names": names, "action": action}
    if errno is not None:
        out["errnoRet"] = errno
    out["args"] = args or []
    out["comment"] = comment
    out["includes"] = {}
    out["excludes"] = {}
    return out


def arg0(value):
    return [{"index": 0, "value": value, "op": "SCMP_CMP_EQ"}]


def derive(default):
    syscalls = []
    for group in default["syscalls"]:
        includes = group.get("includes") or {}
        if includes.get("caps"):
            continue  # granted only with a capability: a turn has none
        names = [n for n in group["names"] if n not in DENIED]
        if not names:
            continue
        syscalls.append(dict(group, names=names))
    for family in (AF_UNIX, AF_INET, AF_INET6):
        syscalls.append(rule(["socket"], args=arg0(family),
                             comment="socket(): AF_UNIX, AF_INET and AF_INET6 only"))
    syscalls.append(rule(["socketpair"], args=arg0(AF_UNIX),
                         comment="socketpair(): AF_UNIX only"))
    syscalls.append(rule(["io_uring_setup", "io_uring_enter", "io_uring_register"],
                         action="SCMP_ACT_ERRNO", errno=ENOSYS,
                         comment="io_uring: ENOSYS so runtimes fall back to epoll"))
    return {
        "defaultAction": default["defaultAction"],
        "archMap": default["archMap"],
        "syscalls": syscalls,
    }


def derive_runsc(turn):
    syscalls = []
    for group in turn["syscalls"]:
        if group["names"] == ["clone3"]:
            group = {k: v for k, v in group.items() if k != "errnoRet"}
            group["action"] = "SCMP_ACT_ALLOW"
            group["comment"] = ("runsc: gVisor fails errno rules with EPERM (no fallback to "
                                "clone); its own kernel serves clone3")
        syscalls.append(group)
    return dict(turn, syscalls=syscalls)


def render(profile):
    return json.dumps(profile, indent=1, sort_keys=False) + "\n"


if __name__ == "__main__":
    out = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else HERE
    turn = derive(json.loads(SOURCE.read_text()))
    (out / "turn.json").write_text(render(turn))
    (out / "turn-runsc.json").write_text(render(derive_runsc(turn)))
