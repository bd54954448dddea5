//! The POSIX-style layer: paths (absolute; a relative path starts at the root, there is no
//! working directory), symbolic links followed as the system calls do, file descriptors with
//! a position, `open` flags, errors as errno values: [`Posix::new`] over a mounted [`Fs`].
//!
//! A [`Posix`] owns the [`Fs`] it serves and its own descriptor table (descriptors are a
//! property of this layer, not of the file system: the FUSE adapter keeps kernel handles
//! instead). Its lock is taken before the file system's.
//!
//! There are no permission checks: the library acts with the rights of its caller (the FUSE
//! mount will let the kernel check permissions). New inodes get the credentials set with
//! [`Posix::set_credentials`] (0:0 by default).
//!
//! Paths are bytes, as on Linux: every call takes any [`PathArg`] (`&str`, `String`, `&[u8]`,
//! `Vec<u8>`, `OsStr`, `Path` and their owned forms), so a name that is not UTF-8 is named
//! like any other. [`Posix::readdir`] lists names as bytes ([`DirEntry::name`]).

use crate::attr::{Attr, DirEntry, SetAttr, TimeSet};
use crate::error::Errno;
use crate::filesystem::Fs;
use crate::inode::FileType;
use crate::layout::{MAX_FILE_SIZE, NAME_MAX, ROOT_INO};
use crate::state::Inner;
use parking_lot::Mutex;
use pmem::Persist;
use std::collections::BTreeMap;

pub use libc::{
    O_ACCMODE, O_APPEND, O_CREAT, O_DIRECTORY, O_EXCL, O_NOFOLLOW, O_RDONLY, O_RDWR, O_TRUNC,
    O_WRONLY,
};

/// Longest path in bytes (including the terminating NUL a C caller would add).
pub const PATH_MAX: usize = 4096;
/// A path as the calls of [`Posix`] take it: the bytes of a Linux path, which need not be
/// UTF-8. Implemented for the string, byte-string, `OsStr` and `Path` types (borrowed and
/// owned).
pub trait PathArg {
    /// The path's bytes.
    fn path_bytes(&self) -> &[u8];
}

impl PathArg for str {
    fn path_bytes(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl PathArg for String {
    fn path_bytes(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl PathArg for [u8] {
    fn path_bytes(&self) -> &[u8] {
        self
    }
}

impl<const N: usize> PathArg for [u8; N] {
    fn path_bytes(&self) -> &[u8] {
        self
    }
}

impl PathArg for Vec<u8> {
    fn path_bytes(&self) -> &[u8] {
        self
    }
}

impl PathArg for std::ffi::OsStr {
    fn path_bytes(&self) -> &[u8] {
        std::os::unix::ffi::OsStrExt::as_bytes(self)
    }
}

impl PathArg for std::ffi::OsString {
    fn path_bytes(&self) -> &[u8] {
        std::os::unix::ffi::OsStrExt::as_bytes(self.as_os_str())
    }
}

impl PathArg for std::path::Path {
    fn path_bytes(&self) -> &[u8] {
        self.as_os_str().path_bytes()
    }
}

impl PathArg for std::path::PathBuf {
    fn path_bytes(&self) -> &[u8] {
        self.as_os_str().path_bytes()
    }
}

impl<T: PathArg + ?Sized> PathArg for &T {
    fn path_bytes(&self) -> &[u8] {
        (**self).path_bytes()
    }
}

/// Most symbolic links followed while resolving one path.
pub const MAX_SYMLINKS: u32 = 40;

/// A file descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fd(pub u32);

/// Where `lseek` counts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Whence {
    /// From the start.
    Set,
    /// From the current position.
    Cur,
    /// From the end.
    End,
}

#[derive(Clone, Copy, Debug)]
struct OpenFile {
    ino: u64,
    generation: u32,
    pos: u64,
    read: bool,
    write: bool,
    append: bool,
}

/// Open descriptors: the lowest free number is handed out, as the kernel does.
#[derive(Debug, Default)]
struct FdTable {
    files: BTreeMap<u32, OpenFile>,
}

impl FdTable {
    fn insert(&mut self, file: OpenFile) -> Fd {
        let fd = (0..)
            .find(|n| !self.files.contains_key(n))
            .expect("a free number");
        self.files.insert(fd, file);
        Fd(fd)
    }

    fn get(&self, fd: Fd) -> Result<OpenFile, Errno> {
        self.files.get(&fd.0).copied().ok_or(Errno::EBADF)
    }

    fn set_pos(&mut self, fd: Fd, pos: u64) {
        if let Some(file) = self.files.get_mut(&fd.0) {
            file.pos = pos;
        }
    }
}

/// The POSIX-style API over a file system it owns.
#[derive(Debug)]
pub struct Posix<B: Persist> {
    fs: Fs<B>,
    fds: Mutex<FdTable>,
}

/// A path split into its directory and last component.
struct Split {
    dir: u64,
    /// `None` for the root itself.
    last: Option<Vec<u8>>,
    trailing_slash: bool,
}

impl<B: Persist> Posix<B> {
    /// The path-and-descriptor API over `fs`, with no descriptor open.
    pub fn new(fs: Fs<B>) -> Self {
        Posix {
            fs,
            fds: Mutex::new(FdTable::default()),
        }
    }

    /// The file system.
    pub fn fs(&self) -> &Fs<B> {
        &self.fs
    }

    /// Gives the file system back. Descriptors still open keep their files open in it (an
    /// unlinked one is then freed by the next mount, as after a crash).
    pub fn into_fs(self) -> Fs<B> {
        self.fs
    }

    /// The owner and group of inodes created from now on.
    pub fn set_credentials(&self, uid: u32, gid: u32) {
        self.fs.lock().creds = (uid, gid);
    }

    fn components(path: &[u8]) -> Result<Vec<&[u8]>, Errno> {
        if path.is_empty() {
            return Err(Errno::ENOENT);
        }
        if path.len() >= PATH_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let parts: Vec<&[u8]> = path
            .split(|&b| b == b'/')
            .filter(|c| !c.is_empty())
            .collect();
        if parts.iter().any(|c| c.len() > NAME_MAX) {
            return Err(Errno::ENAMETOOLONG);
        }
        Ok(parts)
    }

    /// Resolves every component but the last, starting at `base` (or the root for an
    /// absolute path).
    fn split(
        &self,
        inner: &mut Inner,
        base: u64,
        path: &[u8],
        budget: &mut u32,
    ) -> Result<Split, Errno> {
        let parts = Self::components(path)?;
        let mut dir = if path.first() == Some(&b'/') {
            ROOT_INO
        } else {
            base
        };
        let Some((last, walk)) = parts.split_last() else {
            return Ok(Split {
                dir,
                last: None,
                trailing_slash: false,
            });
        };
        for part in walk {
            dir = self.step(inner, dir, part, budget)?;
        }
        Ok(Split {
            dir,
            last: Some(last.to_vec()),
            trailing_slash: path.last() == Some(&b'/'),
        })
    }

    /// Moves from directory `dir` into `name`, following a symbolic link; the result must be
    /// a directory.
    fn step(
        &self,
        inner: &mut Inner,
        dir: u64,
        name: &[u8],
        budget: &mut u32,
    ) -> Result<u64, Errno> {
        let (ino, kind) = self.follow(inner, dir, name, true, budget)?;
        if kind != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        Ok(ino)
    }

    /// Looks `name` up in `dir`; a symbolic link is followed when `follow` is set.
    fn follow(
        &self,
        inner: &mut Inner,
        dir: u64,
        name: &[u8],
        follow: bool,
        budget: &mut u32,
    ) -> Result<(u64, FileType), Errno> {
        let (ino, kind) = self.fs.lookup_locked(inner, dir, name)?;
        if kind != FileType::Symlink || !follow {
            return Ok((ino, kind));
        }
        if *budget == 0 {
            return Err(Errno::ELOOP);
        }
        *budget -= 1;
        let target = self.fs.readlink_locked(ino)?;
        self.resolve_from(inner, dir, &target, true, budget)
    }

    fn resolve_from(
        &self,
        inner: &mut Inner,
        base: u64,
        path: &[u8],
        follow_last: bool,
        budget: &mut u32,
    ) -> Result<(u64, FileType), Errno> {
        let split = self.split(inner, base, path, budget)?;
        let Some(last) = split.last else {
            return Ok((split.dir, FileType::Directory));
        };
        let found = self.follow(
            inner,
            split.dir,
            &last,
            follow_last || split.trailing_slash,
            budget,
        )?;
        if split.trailing_slash && found.1 != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        Ok(found)
    }

    fn resolve(
        &self,
        inner: &mut Inner,
        path: &[u8],
        follow: bool,
    ) -> Result<(u64, FileType), Errno> {
        self.resolve_from(inner, ROOT_INO, path, follow, &mut { MAX_SYMLINKS })
    }

    fn parent_of(&self, inner: &mut Inner, path: &[u8]) -> Result<Split, Errno> {
        self.split(inner, ROOT_INO, path, &mut { MAX_SYMLINKS })
    }

    /// Opens (and with `O_CREAT` creates) a file or directory, as `open(2)` on Linux does.
    ///
    /// `flags` is one access mode (`O_RDONLY`, `O_WRONLY`, `O_RDWR`) or'ed with `O_CREAT`,
    /// `O_EXCL`, `O_TRUNC`, `O_APPEND`, `O_DIRECTORY` and `O_NOFOLLOW`; `O_TMPFILE` is
    /// `EOPNOTSUPP`, other bits are ignored. `perm` is the permission bits of a created file (no umask is applied).
    /// As on Linux: `O_CREAT` on an existing directory is `EISDIR` (`EEXIST` with
    /// `O_EXCL`), `O_CREAT | O_DIRECTORY` is `EINVAL`, `O_TRUNC` empties a regular file
    /// whatever the access mode and makes a directory `EISDIR`, and a trailing slash
    /// follows a final symbolic link even with `O_NOFOLLOW`.
    pub fn open(&self, path: &(impl PathArg + ?Sized), flags: i32, perm: u32) -> Result<Fd, Errno> {
        let path = path.path_bytes();
        let fs = &self.fs;
        let mut fds = self.fds.lock();
        let mut inner = fs.lock();
        let (read, write) = match flags & O_ACCMODE {
            O_RDONLY => (true, false),
            O_WRONLY => (false, true),
            O_RDWR => (true, true),
            _ => return Err(Errno::EINVAL),
        };
        // An unnamed temporary file (it contains O_DIRECTORY's bit, so it would otherwise
        // open the directory or fail with EISDIR): what Linux answers for a file system
        // without it.
        if flags & libc::O_TMPFILE == libc::O_TMPFILE {
            return Err(Errno::EOPNOTSUPP);
        }
        let create = flags & O_CREAT != 0;
        if create && flags & O_DIRECTORY != 0 {
            return Err(Errno::EINVAL);
        }
        let mut budget = MAX_SYMLINKS;
        let split = self.split(&mut inner, ROOT_INO, path, &mut budget)?;
        if split.trailing_slash && create {
            return Err(Errno::EISDIR);
        }
        // A trailing slash asks for a directory: a final symbolic link is followed.
        let last_flags = if split.trailing_slash {
            flags & !O_NOFOLLOW
        } else {
            flags
        };
        let (ino, kind, created) = match split.last {
            None => (split.dir, FileType::Directory, false),
            Some(name) => {
                self.open_last(&mut inner, split.dir, name, last_flags, perm, &mut budget)?
            }
        };
        if create && !created && flags & O_EXCL != 0 {
            return Err(Errno::EEXIST);
        }
        if split.trailing_slash && kind != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        match kind {
            FileType::Directory if write || create || flags & O_TRUNC != 0 => {
                return Err(Errno::EISDIR);
            }
            FileType::Directory => {}
            _ if flags & O_DIRECTORY != 0 => return Err(Errno::ENOTDIR),
            _ => {}
        }
        if flags & O_TRUNC != 0 && kind == FileType::Regular && !created {
            let set = SetAttr {
                size: Some(0),
                ..SetAttr::default()
            };
            fs.setattr_locked(&mut inner, ino, set)?;
        }
        let inode = fs.inode(ino)?;
        *inner.open.entry(ino).or_insert(0) += 1;
        let fd = fds.insert(OpenFile {
            ino,
            generation: inode.generation,
            pos: 0,
            read,
            write,
            append: flags & O_APPEND != 0,
        });
        if created || flags & O_TRUNC != 0 {
            fs.pm().durability_point();
        }
        Ok(fd)
    }

    /// Resolves (and with `O_CREAT` creates) the last component of an `open`: a symbolic link
    /// is followed unless `O_NOFOLLOW`, and a dangling one gets its target created, as Linux
    /// does. Returns the inode, its type and whether it was created.
    fn open_last(
        &self,
        inner: &mut Inner,
        mut dir: u64,
        mut name: Vec<u8>,
        flags: i32,
        perm: u32,
        budget: &mut u32,
    ) -> Result<(u64, FileType, bool), Errno> {
        let create = flags & O_CREAT != 0;
        loop {
            match self.fs.lookup_locked(inner, dir, &name) {
                Ok(_) if create && flags & O_EXCL != 0 => return Err(Errno::EEXIST),
                Ok((_, FileType::Symlink)) if flags & O_NOFOLLOW != 0 => {
                    return Err(Errno::ELOOP);
                }
                Ok((ino, FileType::Symlink)) => {
                    if *budget == 0 {
                        return Err(Errno::ELOOP);
                    }
                    *budget -= 1;
                    let target = self.fs.readlink_locked(ino)?;
                    let split = self.split(inner, dir, &target, budget)?;
                    let Some(last) = split.last else {
                        return Ok((split.dir, FileType::Directory, false));
                    };
                    if split.trailing_slash {
                        let (ino, kind) = self.follow(inner, split.dir, &last, true, budget)?;
                        if kind != FileType::Directory {
                            return Err(Errno::ENOTDIR);
                        }
                        return Ok((ino, kind, false));
                    }
                    (dir, name) = (split.dir, last);
                }
                Ok((ino, kind)) => return Ok((ino, kind, false)),
                Err(Errno::ENOENT) if create => {
                    let perm = perm & crate::inode::PERM_MASK;
                    let attr =
                        self.fs
                            .make_locked(inner, dir, &name, FileType::Regular, perm, None)?;
                    return Ok((attr.ino, FileType::Regular, true));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Creates (or truncates) a regular file and opens it for writing.
    pub fn creat(&self, path: &(impl PathArg + ?Sized), perm: u32) -> Result<Fd, Errno> {
        let path = path.path_bytes();
        self.open(path, O_CREAT | O_WRONLY | O_TRUNC, perm)
    }

    /// The open file of `fd`, checked against its inode (freed and reused: `EBADF`). Called
    /// with the file system's lock held.
    fn file(&self, fds: &FdTable, fd: Fd) -> Result<OpenFile, Errno> {
        let file = fds.get(fd)?;
        let inode = self.fs.inode(file.ino).map_err(|_| Errno::EBADF)?;
        if inode.generation != file.generation {
            return Err(Errno::EBADF);
        }
        Ok(file)
    }

    /// Closes a descriptor (the last close of an unlinked file frees it).
    pub fn close(&self, fd: Fd) -> Result<(), Errno> {
        let mut fds = self.fds.lock();
        let mut inner = self.fs.lock();
        let file = fds.files.remove(&fd.0).ok_or(Errno::EBADF)?;
        self.fs.release_locked(&mut inner, file.ino)
    }

    /// Open descriptors.
    pub fn open_count(&self) -> usize {
        self.fds.lock().files.len()
    }

    /// Reads at the descriptor's position and advances it.
    pub fn read(&self, fd: Fd, buf: &mut [u8]) -> Result<usize, Errno> {
        let mut fds = self.fds.lock();
        let _inner = self.fs.lock();
        let file = self.file(&fds, fd)?;
        let n = self.read_at(&file, buf, file.pos)?;
        fds.set_pos(fd, file.pos + n as u64);
        Ok(n)
    }

    /// Reads at `off` (the position is unchanged).
    pub fn pread(&self, fd: Fd, buf: &mut [u8], off: u64) -> Result<usize, Errno> {
        let fds = self.fds.lock();
        let _inner = self.fs.lock();
        let file = self.file(&fds, fd)?;
        self.read_at(&file, buf, off)
    }

    fn read_at(&self, file: &OpenFile, buf: &mut [u8], off: u64) -> Result<usize, Errno> {
        if !file.read {
            return Err(Errno::EBADF);
        }
        let inode = self.fs.inode(file.ino)?;
        if inode.kind() == Some(FileType::Directory) {
            return Err(Errno::EISDIR);
        }
        self.fs.read_inode(&inode, off, buf)
    }

    /// Writes at the descriptor's position (at the end with `O_APPEND`) and advances it.
    pub fn write(&self, fd: Fd, data: &[u8]) -> Result<usize, Errno> {
        let mut fds = self.fds.lock();
        let mut inner = self.fs.lock();
        let file = self.file(&fds, fd)?;
        let off = if file.append {
            self.fs.inode(file.ino)?.size
        } else {
            file.pos
        };
        let n = self.write_at(&mut inner, &file, data, off)?;
        fds.set_pos(fd, off + n as u64);
        Ok(n)
    }

    /// Writes at `off` (the position is unchanged).
    pub fn pwrite(&self, fd: Fd, data: &[u8], off: u64) -> Result<usize, Errno> {
        let fds = self.fds.lock();
        let mut inner = self.fs.lock();
        let file = self.file(&fds, fd)?;
        self.write_at(&mut inner, &file, data, off)
    }

    fn write_at(
        &self,
        inner: &mut Inner,
        file: &OpenFile,
        data: &[u8],
        off: u64,
    ) -> Result<usize, Errno> {
        if !file.write {
            return Err(Errno::EBADF);
        }
        let n = self.fs.write_locked(inner, file.ino, off, data)?;
        self.fs.pm().durability_point();
        Ok(n)
    }

    /// Moves the position; returns the new one. A position before the start or past the
    /// largest file size ([`MAX_FILE_SIZE`]) is `EINVAL`, as
    /// Linux refuses one past its file system's limit; past the end of the file is allowed.
    pub fn lseek(&self, fd: Fd, off: i64, whence: Whence) -> Result<u64, Errno> {
        let mut fds = self.fds.lock();
        let _inner = self.fs.lock();
        let file = self.file(&fds, fd)?;
        let base = match whence {
            Whence::Set => 0,
            Whence::Cur => file.pos,
            Whence::End => self.fs.inode(file.ino)?.size,
        };
        let pos = base
            .checked_add_signed(off)
            .filter(|&pos| pos <= MAX_FILE_SIZE)
            .ok_or(Errno::EINVAL)?;
        fds.set_pos(fd, pos);
        Ok(pos)
    }

    /// Sets the size of an open file.
    pub fn ftruncate(&self, fd: Fd, size: u64) -> Result<(), Errno> {
        let fds = self.fds.lock();
        let mut inner = self.fs.lock();
        let file = self.file(&fds, fd)?;
        if !file.write {
            return Err(Errno::EINVAL);
        }
        self.truncate_ino(&mut inner, file.ino, size)
    }

    fn truncate_ino(&self, inner: &mut Inner, ino: u64, size: u64) -> Result<(), Errno> {
        let set = SetAttr {
            size: Some(size),
            ..SetAttr::default()
        };
        self.fs.setattr_locked(inner, ino, set)?;
        self.fs.pm().durability_point();
        Ok(())
    }

    /// Makes the file durable: every operation already is, so this only checks `fd`.
    pub fn fsync(&self, fd: Fd) -> Result<(), Errno> {
        let fds = self.fds.lock();
        let _inner = self.fs.lock();
        self.file(&fds, fd)?;
        self.fs.pm().durability_point();
        Ok(())
    }

    /// Allocates blocks for `[off, off + len)` of an open file (`fallocate`: mode 0 grows
    /// the file, `keep_size` does not).
    pub fn fallocate(&self, fd: Fd, off: u64, len: u64, keep_size: bool) -> Result<(), Errno> {
        let writable = |file: &OpenFile| match file.write {
            true => Ok(()),
            false => Err(Errno::EBADF),
        };
        self.with_fd(fd, writable, |ino| {
            self.fs.fallocate(ino, off, len, keep_size)
        })
    }

    /// Changes attributes of an open file (`fchmod`, `fchown`, `futimens`, and `ftruncate`
    /// with a size, which needs a descriptor open for writing as [`Posix::ftruncate`] does:
    /// `EINVAL`). As `fchmod(2)`, bits of `perm` above `0o7777` are ignored.
    pub fn fsetattr(&self, fd: Fd, mut set: SetAttr) -> Result<Attr, Errno> {
        let fds = self.fds.lock();
        let mut inner = self.fs.lock();
        let file = self.file(&fds, fd)?;
        if set.size.is_some() && !file.write {
            return Err(Errno::EINVAL);
        }
        set.perm = set.perm.map(|perm| perm & crate::inode::PERM_MASK);
        let attr = self.fs.setattr_locked(&mut inner, file.ino, set)?;
        self.fs.pm().durability_point();
        Ok(attr)
    }

    /// Attributes of an open file.
    pub fn fstat(&self, fd: Fd) -> Result<Attr, Errno> {
        let fds = self.fds.lock();
        let inner = self.fs.lock();
        let file = self.file(&fds, fd)?;
        let inode = self.fs.inode(file.ino)?;
        Ok(self.fs.attr(&inner, file.ino, &inode))
    }

    /// Attributes, following a final symbolic link.
    pub fn stat(&self, path: &(impl PathArg + ?Sized)) -> Result<Attr, Errno> {
        let path = path.path_bytes();
        self.stat_with(path, true)
    }

    /// Attributes of the path itself (a symbolic link is not followed).
    pub fn lstat(&self, path: &(impl PathArg + ?Sized)) -> Result<Attr, Errno> {
        let path = path.path_bytes();
        self.stat_with(path, false)
    }

    fn stat_with(&self, path: &[u8], follow: bool) -> Result<Attr, Errno> {
        let mut inner = self.fs.lock();
        let (ino, _) = self.resolve(&mut inner, path, follow)?;
        let inode = self.fs.inode(ino)?;
        Ok(self.fs.attr(&inner, ino, &inode))
    }

    /// Sets the size of a file by path.
    pub fn truncate(&self, path: &(impl PathArg + ?Sized), size: u64) -> Result<(), Errno> {
        let path = path.path_bytes();
        let mut inner = self.fs.lock();
        let (ino, kind) = self.resolve(&mut inner, path, true)?;
        if kind == FileType::Directory {
            return Err(Errno::EISDIR);
        }
        self.truncate_ino(&mut inner, ino, size)
    }

    /// Creates a directory. As `mkdir(2)`, only the permission bits and the sticky bit of
    /// `perm` are kept (a set-group-ID parent gives its group and that bit).
    pub fn mkdir(&self, path: &(impl PathArg + ?Sized), perm: u32) -> Result<(), Errno> {
        let path = path.path_bytes();
        let mut inner = self.fs.lock();
        let split = self.parent_of(&mut inner, path)?;
        let name = split.last.ok_or(Errno::EEXIST)?;
        self.fs.make_locked(
            &mut inner,
            split.dir,
            &name,
            FileType::Directory,
            perm & 0o1777,
            None,
        )?;
        self.fs.pm().durability_point();
        Ok(())
    }

    /// Removes an empty directory.
    pub fn rmdir(&self, path: &(impl PathArg + ?Sized)) -> Result<(), Errno> {
        let path = path.path_bytes();
        let mut inner = self.fs.lock();
        let split = self.parent_of(&mut inner, path)?;
        let name = split.last.ok_or(Errno::EBUSY)?;
        self.fs.rmdir_locked(&mut inner, split.dir, &name)?;
        self.fs.pm().durability_point();
        Ok(())
    }

    /// Removes a name (not a directory).
    pub fn unlink(&self, path: &(impl PathArg + ?Sized)) -> Result<(), Errno> {
        let path = path.path_bytes();
        let mut inner = self.fs.lock();
        let split = self.parent_of(&mut inner, path)?;
        let name = split.last.ok_or(Errno::EISDIR)?;
        if split.trailing_slash {
            let (_, kind) = self.fs.lookup_locked(&mut inner, split.dir, &name)?;
            return Err(if kind == FileType::Directory {
                Errno::EISDIR
            } else {
                Errno::ENOTDIR
            });
        }
        self.fs.unlink_locked(&mut inner, split.dir, &name)?;
        self.fs.pm().durability_point();
        Ok(())
    }

    /// Renames `from` to `to`, replacing `to` if it exists and is compatible.
    pub fn rename(
        &self,
        from: &(impl PathArg + ?Sized),
        to: &(impl PathArg + ?Sized),
    ) -> Result<(), Errno> {
        let from = from.path_bytes();
        let to = to.path_bytes();
        let mut inner = self.fs.lock();
        let a = self.parent_of(&mut inner, from)?;
        let b = self.parent_of(&mut inner, to)?;
        let (Some(n1), Some(n2)) = (a.last, b.last) else {
            return Err(Errno::EBUSY);
        };
        if a.trailing_slash || b.trailing_slash {
            let (_, kind) = self.fs.lookup_locked(&mut inner, a.dir, &n1)?;
            if kind != FileType::Directory {
                return Err(Errno::ENOTDIR);
            }
        }
        self.fs.rename_locked(&mut inner, a.dir, &n1, b.dir, &n2)?;
        self.fs.pm().durability_point();
        Ok(())
    }

    /// Adds the hard link `new` to the file `old` (a final symbolic link is not followed).
    pub fn link(
        &self,
        old: &(impl PathArg + ?Sized),
        new: &(impl PathArg + ?Sized),
    ) -> Result<(), Errno> {
        let old = old.path_bytes();
        let new = new.path_bytes();
        let mut inner = self.fs.lock();
        let (ino, _) = self.resolve(&mut inner, old, false)?;
        let split = self.parent_of(&mut inner, new)?;
        let name = split.last.ok_or(Errno::EEXIST)?;
        if split.trailing_slash {
            return Err(Errno::ENOENT);
        }
        self.fs.link_locked(&mut inner, ino, split.dir, &name)?;
        self.fs.pm().durability_point();
        Ok(())
    }

    /// Creates the symbolic link `path` with contents `target` (a `path` with a trailing
    /// slash names no link that can be made: `ENOENT`, or `EEXIST` when it exists).
    pub fn symlink(
        &self,
        target: &(impl PathArg + ?Sized),
        path: &(impl PathArg + ?Sized),
    ) -> Result<(), Errno> {
        let target = target.path_bytes();
        let path = path.path_bytes();
        let mut inner = self.fs.lock();
        let split = self.parent_of(&mut inner, path)?;
        let name = split.last.ok_or(Errno::EEXIST)?;
        if split.trailing_slash {
            return Err(match self.fs.lookup_locked(&mut inner, split.dir, &name) {
                Ok(_) => Errno::EEXIST,
                Err(_) => Errno::ENOENT,
            });
        }
        self.fs.make_locked(
            &mut inner,
            split.dir,
            &name,
            FileType::Symlink,
            0o777,
            Some(target),
        )?;
        self.fs.pm().durability_point();
        Ok(())
    }

    /// The contents of a symbolic link.
    pub fn readlink(&self, path: &(impl PathArg + ?Sized)) -> Result<Vec<u8>, Errno> {
        let path = path.path_bytes();
        let mut inner = self.fs.lock();
        let (ino, _) = self.resolve(&mut inner, path, false)?;
        self.fs.readlink_locked(ino)
    }

    fn set(&self, path: &[u8], set: SetAttr) -> Result<(), Errno> {
        self.setattr(path, true, set)
    }

    /// Changes the attributes in `set` of `path`; `follow`: of the file a final symbolic
    /// link names, else of the link itself (as `lchown`, `utimensat(AT_SYMLINK_NOFOLLOW)`).
    pub fn setattr(
        &self,
        path: &(impl PathArg + ?Sized),
        follow: bool,
        set: SetAttr,
    ) -> Result<(), Errno> {
        let path = path.path_bytes();
        let mut inner = self.fs.lock();
        let (ino, _) = self.resolve(&mut inner, path, follow)?;
        self.fs.setattr_locked(&mut inner, ino, set)?;
        self.fs.pm().durability_point();
        Ok(())
    }

    /// Changes the permission bits (and set-user-ID, set-group-ID, sticky). As `chmod(2)`,
    /// bits above them are ignored, so a whole `st_mode` ([`Attr::mode`]) can be passed.
    pub fn chmod(&self, path: &(impl PathArg + ?Sized), perm: u32) -> Result<(), Errno> {
        let path = path.path_bytes();
        self.set(
            path,
            SetAttr {
                perm: Some(perm & crate::inode::PERM_MASK),
                ..SetAttr::default()
            },
        )
    }

    /// Changes the owner and/or group.
    pub fn chown(
        &self,
        path: &(impl PathArg + ?Sized),
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> Result<(), Errno> {
        let path = path.path_bytes();
        self.set(
            path,
            SetAttr {
                uid,
                gid,
                ..SetAttr::default()
            },
        )
    }

    /// Sets the access and/or modification time.
    pub fn utimens(
        &self,
        path: &(impl PathArg + ?Sized),
        atime: Option<TimeSet>,
        mtime: Option<TimeSet>,
    ) -> Result<(), Errno> {
        self.set(
            path.path_bytes(),
            SetAttr {
                atime,
                mtime,
                ..SetAttr::default()
            },
        )
    }

    /// Runs `op`, which takes the file system's lock itself, on the inode `path` names, with
    /// a handle held on it from the lookup on: a concurrent unlink cannot free the inode and
    /// give its number to a new file in between (which `op` would then change instead).
    fn with_path<T>(
        &self,
        path: &[u8],
        follow: bool,
        op: impl FnOnce(u64) -> Result<T, Errno>,
    ) -> Result<T, Errno> {
        let ino = {
            let mut inner = self.fs.lock();
            let (ino, _) = self.resolve(&mut inner, path, follow)?;
            Self::hold(&mut inner, ino);
            ino
        };
        self.run_held(ino, op)
    }

    /// As [`Posix::with_path`] for the file open as `fd`, checked by `check` first (a
    /// concurrent `close` of `fd` cannot free it either).
    fn with_fd<T>(
        &self,
        fd: Fd,
        check: impl FnOnce(&OpenFile) -> Result<(), Errno>,
        op: impl FnOnce(u64) -> Result<T, Errno>,
    ) -> Result<T, Errno> {
        let ino = {
            let fds = self.fds.lock();
            let mut inner = self.fs.lock();
            let file = self.file(&fds, fd)?;
            check(&file)?;
            Self::hold(&mut inner, file.ino);
            file.ino
        };
        self.run_held(ino, op)
    }

    fn hold(inner: &mut Inner, ino: u64) {
        *inner.open.entry(ino).or_insert(0) += 1;
    }

    /// Runs `op` on `ino`, then drops the handle [`Posix::hold`] took (the last one frees an
    /// unlinked file, as a `close` does).
    fn run_held<T>(&self, ino: u64, op: impl FnOnce(u64) -> Result<T, Errno>) -> Result<T, Errno> {
        let result = op(ino);
        let released = self.fs.release_inode(ino);
        let value = result?;
        released?;
        Ok(value)
    }

    /// The value of extended attribute `name` of `path` (`follow`: through a final symbolic
    /// link, as `getxattr`; else as `lgetxattr`).
    pub fn getxattr(
        &self,
        path: &(impl PathArg + ?Sized),
        name: &[u8],
        follow: bool,
    ) -> Result<Vec<u8>, Errno> {
        let path = path.path_bytes();
        self.with_path(path, follow, |ino| self.fs.getxattr(ino, name))
    }

    /// The extended attribute names of `path`.
    pub fn listxattr(
        &self,
        path: &(impl PathArg + ?Sized),
        follow: bool,
    ) -> Result<Vec<Vec<u8>>, Errno> {
        let path = path.path_bytes();
        self.with_path(path, follow, |ino| self.fs.listxattr(ino))
    }

    /// Sets extended attribute `name` of `path`.
    pub fn setxattr(
        &self,
        path: &(impl PathArg + ?Sized),
        name: &[u8],
        value: &[u8],
        mode: crate::xattr::SetMode,
        follow: bool,
    ) -> Result<(), Errno> {
        self.with_path(path.path_bytes(), follow, |ino| {
            self.fs.setxattr(ino, name, value, mode)
        })
    }

    /// Removes extended attribute `name` of `path`.
    pub fn removexattr(
        &self,
        path: &(impl PathArg + ?Sized),
        name: &[u8],
        follow: bool,
    ) -> Result<(), Errno> {
        let path = path.path_bytes();
        self.with_path(path, follow, |ino| self.fs.removexattr(ino, name))
    }

    /// The entries of a directory (`.` and `..` first).
    pub fn readdir(&self, path: &(impl PathArg + ?Sized)) -> Result<Vec<DirEntry>, Errno> {
        let path = path.path_bytes();
        let mut inner = self.fs.lock();
        let (ino, kind) = self.resolve(&mut inner, path, true)?;
        if kind != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        self.fs.readdir_locked(&mut inner, ino)
    }
}

impl<B: Persist> Posix<B> {
    /// Maps `[off, off + len)` of the file open as `fd` (see [`crate::mmap`]): a readable
    /// descriptor is required, and a writable one for a writable map (`EACCES`).
    pub fn mmap(
        &self,
        fd: Fd,
        off: u64,
        len: u64,
        writable: bool,
    ) -> Result<crate::mmap::FileMap<'_, B>, Errno> {
        let allowed = |file: &OpenFile| match file.read && (file.write || !writable) {
            true => Ok(()),
            false => Err(Errno::EACCES),
        };
        self.with_fd(fd, allowed, |ino| self.fs.map(ino, off, len, writable))
    }
}
