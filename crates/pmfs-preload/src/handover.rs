//! Served descriptors across `exec`. A served descriptor is this process's memory, which
//! `exec` replaces; the kernel keeps only its placeholder number. So `execve` (and `execv`,
//! `execvp`, `execvpe`) lists, in the environment variable [`VAR`], each served descriptor
//! that survives `exec` (no close-on-exec flag) with its file, flags and position; the new
//! program's copy of this library opens those files again at the same numbers when it
//! loads. This is how `bash -c 'ls > /pmfs/out'` works: bash opens the file in the child
//! it forked, which owns the pool, and `exec`'s release of the pool (its descriptors are
//! close-on-exec) lets `ls` open it. A process that did not open the pool itself (a forked
//! child of its owner, as `dash` forks after redirecting in the shell) hands nothing over:
//! its parent still holds the pool, so the new program could not open it.

use crate::abi::served_fd;
use crate::served::{Open, config, served, served_or_open};
use libc::{c_char, c_int, c_long};
use pmfs::Whence;
use std::ffi::{CStr, CString};

/// The environment variable naming the handed-over descriptors:
/// `kfd,flags,position,inode,hex(path)` separated by `;`.
const VAR: &str = "PMFS_PRELOAD_HANDOVER";

/// One served descriptor handed over.
#[derive(Debug, PartialEq, Eq)]
struct Handed {
    kfd: c_int,
    flags: c_int,
    pos: u64,
    ino: u64,
    path: Vec<u8>,
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

fn encode(list: &[Handed]) -> String {
    list.iter()
        .map(|h| {
            let path = hex(&h.path);
            format!("{},{},{},{},{path}", h.kfd, h.flags, h.pos, h.ino)
        })
        .collect::<Vec<_>>()
        .join(";")
}

fn decode(text: &str) -> Vec<Handed> {
    let one = |item: &str| -> Option<Handed> {
        let mut parts = item.split(',');
        let handed = Handed {
            kfd: parts.next()?.parse().ok()?,
            flags: parts.next()?.parse().ok()?,
            pos: parts.next()?.parse().ok()?,
            ino: parts.next()?.parse().ok()?,
            path: unhex(parts.next()?)?,
        };
        parts.next().is_none().then_some(handed)
    };
    text.split(';').filter_map(one).collect()
}

/// Whether kernel descriptor `kfd` survives `exec`.
fn survives_exec(kfd: c_int) -> bool {
    let fcntl = next!("fcntl", unsafe extern "C" fn(c_int, c_int, c_long) -> c_int);
    // SAFETY: reads the descriptor flags of `kfd`.
    let flags = unsafe { fcntl(kfd, libc::F_GETFD, 0) };
    flags >= 0 && flags & libc::FD_CLOEXEC == 0
}

/// The served descriptors this process can hand over to the program it `exec`s.
fn to_hand_over() -> Vec<Handed> {
    let Some(fs) = served() else {
        return Vec::new();
    };
    if fs.owner_pid != std::process::id() {
        return Vec::new();
    }
    let kfds: Vec<c_int> = fs.fds.read().keys().copied().collect();
    kfds.into_iter()
        .filter(|&kfd| survives_exec(kfd))
        .filter_map(|kfd| {
            let (fs, open) = served_fd(kfd)?;
            let ino = fs.px.fstat(open.fd).ok()?.ino;
            let pos = fs.px.lseek(open.fd, 0, Whence::Cur).ok()?;
            Some(Handed {
                kfd,
                flags: open.flags,
                pos,
                ino,
                path: open.path,
            })
        })
        .collect()
}

/// `envp` with each of `vars` set (any earlier setting of them dropped).
///
/// # Safety
/// `envp` is null or a null-terminated array of NUL-terminated strings.
unsafe fn environment_with(envp: *const *const c_char, vars: &[(&str, String)]) -> Vec<CString> {
    let mut out = Vec::new();
    let mut at = envp;
    while !at.is_null() {
        // SAFETY: the caller's null-terminated array.
        let entry = unsafe { *at };
        if entry.is_null() {
            break;
        }
        // SAFETY: each entry is NUL-terminated.
        let bytes = unsafe { CStr::from_ptr(entry) };
        let replaced = vars
            .iter()
            .any(|(name, _)| bytes.to_bytes().starts_with(format!("{name}=").as_bytes()));
        if !replaced {
            out.push(bytes.to_owned());
        }
        // SAFETY: the next slot of the same array (the null one ends the loop).
        at = unsafe { at.add(1) };
    }
    // The values are decimal numbers and hex digits: never a NUL.
    out.extend(
        vars.iter()
            .filter_map(|(name, value)| CString::new(format!("{name}={value}")).ok()),
    );
    out
}

/// Calls `start` with `envp`, extended by `vars` if there are any.
///
/// # Safety
/// `envp` is null or a null-terminated array of NUL-terminated strings.
pub(crate) unsafe fn with_variables(
    envp: *const *const c_char,
    vars: &[(&str, String)],
    start: impl FnOnce(*const *const c_char) -> c_int,
) -> c_int {
    if vars.is_empty() {
        return start(envp);
    }
    // SAFETY: the caller's environment array.
    let strings = unsafe { environment_with(envp, vars) };
    let mut pointers: Vec<*const c_char> = strings.iter().map(|s| s.as_ptr()).collect();
    pointers.push(std::ptr::null());
    start(pointers.as_ptr())
}

/// The served working directory for a program this process starts, as a variable.
pub(crate) fn cwd_variable() -> Vec<(&'static str, String)> {
    crate::cwd::handed_over()
        .map(|cwd| (crate::cwd::VAR, cwd))
        .into_iter()
        .collect()
}

/// Calls `exec` with `envp`, extended by the served descriptors to hand over and the
/// served working directory, if any.
///
/// # Safety
/// `envp` is null or a null-terminated array of NUL-terminated strings.
unsafe fn with_handover(
    envp: *const *const c_char,
    exec: impl FnOnce(*const *const c_char) -> c_int,
) -> c_int {
    let mut vars = cwd_variable();
    let handed = to_hand_over();
    if !handed.is_empty() {
        vars.push((VAR, encode(&handed)));
    }
    // SAFETY: the caller's environment array.
    unsafe { with_variables(envp, &vars, exec) }
}

/// The process's environment.
fn environ() -> *const *const c_char {
    unsafe extern "C" {
        static environ: *const *const c_char;
    }
    // SAFETY: reads glibc's environment pointer.
    unsafe { environ }
}

type ExecveFn =
    unsafe extern "C" fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;

/// # Safety
/// C `execve`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let real = next!("execve", ExecveFn);
    // SAFETY: `execve`'s environment; the call is forwarded with it or its extension.
    unsafe { with_handover(envp, |env| real(path, argv, env)) }
}

/// # Safety
/// C `execv`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: `execv` is `execve` with the process's environment.
    unsafe { execve(path, argv, environ()) }
}

/// # Safety
/// C `execvpe`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let real = next!("execvpe", ExecveFn);
    // SAFETY: `execvpe`'s environment; the call is forwarded with it or its extension.
    unsafe { with_handover(envp, |env| real(file, argv, env)) }
}

/// # Safety
/// C `execvp`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: `execvp` is `execvpe` with the process's environment.
    unsafe { execvpe(file, argv, environ()) }
}

/// Opens the files handed over by the program that `exec`ed this one at the numbers they
/// had (their placeholders survived `exec`), at the positions they had. A file that is
/// gone, or is another file now, stays a placeholder (`EBADF`).
fn take_over(list: &[Handed]) {
    let Some(config) = config() else { return };
    let Ok(fs) = served_or_open(config) else {
        return;
    };
    for h in list.iter().filter(|h| is_placeholder(h.kfd)) {
        let reopen = h.flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC);
        let Ok(fd) = fs.px.open(&h.path, reopen, 0) else {
            continue;
        };
        let same = fs.px.fstat(fd).is_ok_and(|a| a.ino == h.ino);
        let placed = same
            && i64::try_from(h.pos)
                .ok()
                .is_some_and(|pos| fs.px.lseek(fd, pos, Whence::Set).is_ok());
        if !placed {
            let _ = fs.px.close(fd);
            continue;
        }
        let open = Open {
            fd,
            path: h.path.clone(),
            flags: h.flags,
        };
        fs.fds.write().insert(h.kfd, open);
        crate::stdio::serve_std_stream(h.kfd);
    }
}

/// Whether kernel descriptor `kfd` is a served descriptor's placeholder (an `O_PATH`
/// descriptor of `/`): a variable left over or set by hand never turns a real descriptor
/// (a terminal, a pipe, a kernel file) into a served one.
fn is_placeholder(kfd: c_int) -> bool {
    let fcntl = next!("fcntl", unsafe extern "C" fn(c_int, c_int, c_long) -> c_int);
    // SAFETY: reads the status flags of `kfd` (an error for a closed number).
    let flags = unsafe { fcntl(kfd, libc::F_GETFL, 0) };
    flags >= 0
        && flags & libc::O_PATH != 0
        && std::fs::read_link(format!("/proc/self/fd/{kfd}"))
            .is_ok_and(|target| target == std::path::Path::new("/"))
}

/// Runs when the library loads: takes over what the program that `exec`ed this one
/// handed over, and removes the variable (it is this program's alone).
extern "C" fn at_load() {
    let Some(text) = std::env::var_os(VAR) else {
        return;
    };
    // SAFETY: called while the library loads, before the program's threads exist.
    unsafe { std::env::remove_var(VAR) };
    if let Some(text) = text.to_str() {
        take_over(&decode(text));
    }
}

#[used]
#[unsafe(link_section = ".init_array")]
static AT_LOAD: extern "C" fn() = at_load;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_survives_its_encoding() {
        let list = vec![
            Handed {
                kfd: 1,
                flags: libc::O_WRONLY | libc::O_APPEND,
                pos: 12,
                ino: 7,
                path: b"/a dir/with;odd,name\xe9".to_vec(),
            },
            Handed {
                kfd: 9,
                flags: libc::O_RDONLY,
                pos: 0,
                ino: 1,
                path: b"/".to_vec(),
            },
        ];
        assert_eq!(decode(&encode(&list)), list);
        assert_eq!(decode("garbage;1,2"), vec![]);
    }
}
