//! The FUSE adapter: kernel requests (`fuser::Filesystem`) turned into calls of the
//! inode-level API of `pmfs::Fs`.
//!
//! - Inode numbers are the file system's own (the root is 1, as FUSE wants); every entry
//!   handed to the kernel takes a reference that `forget` drops (`pmfs::Fs::lookup_pinned`),
//!   so a freed number is not reused while the kernel may still know it.
//! - Open files and directories hold a handle (`Fs::open_inode`): an unlinked open file
//!   lives until its last release, on the persistent truncate list.
//! - Permission checks are the kernel's (`default_permissions`); new nodes get the caller's
//!   uid and gid. The kernel applies the umask before it sends a mode.
//! - Every operation is durable when it returns, so `flush`, `fsync` and `fsyncdir` have
//!   nothing to do.

use crate::damage::DamageLog;
use fuser::{
    AccessFlags, FileAttr, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, TimeOrNow, WriteFlags,
};
use pmem::Persist;
use pmfs::{Attr, Caller, FileType, Fs, SetAttr, SetMode, TimeSet};
use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A mounted `Fs` as a FUSE file system. Dropping the session (unmount) unmounts the
/// file system cleanly (`destroy`).
#[derive(Debug)]
pub struct FuseFs<B: Persist + 'static> {
    fs: Option<Fs<B>>,
    ttl: Duration,
    writeback: bool,
    damage: DamageLog,
}

impl<B: Persist + 'static> FuseFs<B> {
    /// Serves `fs`; the kernel caches attributes and entries for `ttl`.
    pub fn new(fs: Fs<B>, ttl: Duration) -> Self {
        FuseFs {
            fs: Some(fs),
            ttl,
            writeback: false,
            damage: DamageLog::default(),
        }
    }

    /// Lets the kernel cache writes and send them later (`FUSE_WRITEBACK_CACHE`): data is
    /// durable at `fsync` (or unmount), not when `write` returns.
    pub fn with_writeback_cache(mut self, writeback: bool) -> Self {
        self.writeback = writeback;
        self
    }

    fn fs(&self) -> &Fs<B> {
        self.fs.as_ref().expect("no request arrives after destroy")
    }

    fn entry(&self, op: &str, ino: u64, reply: ReplyEntry, result: Result<Attr, pmfs::Errno>) {
        match result {
            Ok(attr) => reply.entry(
                &self.ttl,
                &file_attr(&attr),
                Generation(u64::from(attr.generation)),
            ),
            Err(e) => reply.error(self.failed(op, ino, e)),
        }
    }

    fn empty(&self, op: &str, ino: u64, reply: ReplyEmpty, result: Result<(), pmfs::Errno>) {
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(self.failed(op, ino, e)),
        }
    }

    /// The kernel's errno for `e`, which request `op` on inode `ino` got; damage (`EIO`)
    /// is reported on stderr, the server's log, once per damaged object.
    fn failed(&self, op: &str, ino: u64, e: pmfs::Errno) -> fuser::Errno {
        if e == pmfs::Errno::EIO
            && let Some(line) = self.damage.line(op, ino, pmfs::error::take_damage())
        {
            // Not `eprintln!`: stderr is the server's log, which may be full; a panic in a
            // request would end the session and leave the mount dead.
            let _ = writeln!(std::io::stderr(), "{line}");
        }
        errno(e)
    }

    #[allow(clippy::too_many_arguments)]
    fn make(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        kind: FileType,
        mode: u32,
        target: Option<&[u8]>,
        rdev: u64,
    ) -> Result<Attr, pmfs::Errno> {
        let caller = Caller {
            uid: req.uid(),
            gid: req.gid(),
        };
        let perm = mode & 0o7777;
        self.fs()
            .make_pinned(parent.0, name.as_bytes(), kind, perm, target, rdev, caller)
    }
}

/// The kernel's errno for a file-system error.
pub fn errno(e: pmfs::Errno) -> fuser::Errno {
    fuser::Errno::from_i32(e.raw())
}

fn time(ns: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(ns)
}

/// `t` in nanoseconds since 1970, as an inode stores a time (`u64`): `EINVAL` for a time
/// the format cannot hold (before 1970, or after 2554), as the preload answers, rather than
/// a different time stored in its place.
fn nanos(t: SystemTime) -> Result<u64, fuser::Errno> {
    let since = t
        .duration_since(UNIX_EPOCH)
        .map_err(|_| fuser::Errno::EINVAL)?;
    u64::try_from(since.as_nanos()).map_err(|_| fuser::Errno::EINVAL)
}

fn kind(kind: FileType) -> fuser::FileType {
    match kind {
        FileType::Regular => fuser::FileType::RegularFile,
        FileType::Directory => fuser::FileType::Directory,
        FileType::Symlink => fuser::FileType::Symlink,
        FileType::Fifo => fuser::FileType::NamedPipe,
        FileType::CharDevice => fuser::FileType::CharDevice,
        FileType::BlockDevice => fuser::FileType::BlockDevice,
        FileType::Socket => fuser::FileType::Socket,
    }
}

/// The FUSE attributes of `attr`.
pub fn file_attr(attr: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(attr.ino),
        size: attr.size,
        blocks: attr.blocks,
        atime: time(attr.atime),
        mtime: time(attr.mtime),
        ctime: time(attr.ctime),
        crtime: time(attr.btime),
        kind: kind(attr.kind),
        perm: (attr.perm & 0o7777) as u16,
        nlink: attr.nlink,
        uid: attr.uid,
        gid: attr.gid,
        rdev: u32::try_from(attr.rdev).unwrap_or(0),
        blksize: attr.blksize,
        flags: 0,
    }
}

/// The `XATTR_*` flags of `setxattr(2)`.
mod libc_flags {
    pub const XATTR_CREATE: i32 = 1;
    pub const XATTR_REPLACE: i32 = 2;
}

/// Answers a size probe (`size` 0) with the length, else the bytes, or `ERANGE` when they
/// do not fit.
fn xattr_reply(reply: ReplyXattr, bytes: &[u8], size: u32) {
    if size == 0 {
        reply.size(u32::try_from(bytes.len()).unwrap_or(u32::MAX));
    } else if bytes.len() > size as usize {
        reply.error(fuser::Errno::ERANGE);
    } else {
        reply.data(bytes);
    }
}

fn time_set(t: TimeOrNow) -> Result<TimeSet, fuser::Errno> {
    match t {
        TimeOrNow::Now => Ok(TimeSet::Now),
        TimeOrNow::SpecificTime(at) => nanos(at).map(TimeSet::At),
    }
}

impl<B: Persist + 'static> Filesystem for FuseFs<B> {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Lookups and readdirs of one directory may run in parallel (the file system
        // serialises them itself).
        let mut wanted = InitFlags::FUSE_PARALLEL_DIROPS;
        if self.writeback {
            wanted |= InitFlags::FUSE_WRITEBACK_CACHE;
        }
        let available = config.capabilities() & wanted;
        if self.writeback && !available.contains(InitFlags::FUSE_WRITEBACK_CACHE) {
            return Err(std::io::Error::other(
                "the kernel does not offer FUSE_WRITEBACK_CACHE",
            ));
        }
        config
            .add_capabilities(available)
            .map_err(|missing| std::io::Error::other(format!("FUSE capabilities {missing:?}")))
    }

    fn destroy(&mut self) {
        if let Some(fs) = self.fs.take() {
            // Everything is durable already; this marks the pool clean.
            if let Err(error) = fs.unmount() {
                let _ = writeln!(std::io::stderr(), "ferrite-fs: unmount: {error}");
            }
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.entry(
            "lookup",
            parent.0,
            reply,
            self.fs().lookup_pinned(parent.0, name.as_bytes()),
        );
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.fs().forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.fs().getattr(ino.0) {
            Ok(attr) => reply.attr(&self.ttl, &file_attr(&attr)),
            Err(e) => reply.error(self.failed("getattr", ino.0, e)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let times = atime.map(time_set).transpose().and_then(|atime| {
            let mtime = mtime.map(time_set).transpose()?;
            Ok((atime, mtime))
        });
        let (atime, mtime) = match times {
            Ok(times) => times,
            Err(e) => return reply.error(e),
        };
        let set = SetAttr {
            perm: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime,
            mtime,
        };
        let result = if set == SetAttr::default() {
            self.fs().getattr(ino.0)
        } else {
            self.fs().setattr(ino.0, set)
        };
        match result {
            Ok(attr) => reply.attr(&self.ttl, &file_attr(&attr)),
            Err(e) => reply.error(self.failed("setattr", ino.0, e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.fs().readlink(ino.0) {
            Ok(target) => reply.data(&target),
            Err(e) => reply.error(self.failed("readlink", ino.0, e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let Some(kind) = FileType::from_mode(mode) else {
            return reply.error(fuser::Errno::EINVAL);
        };
        if kind == FileType::Directory || kind == FileType::Symlink {
            return reply.error(fuser::Errno::EINVAL);
        }
        let rdev = if matches!(kind, FileType::CharDevice | FileType::BlockDevice) {
            u64::from(rdev)
        } else {
            0
        };
        let made = self.make(req, parent, name, kind, mode, None, rdev);
        self.entry("mknod", parent.0, reply, made);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let made = self.make(req, parent, name, FileType::Directory, mode, None, 0);
        self.entry("mkdir", parent.0, reply, made);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.empty(
            "unlink",
            parent.0,
            reply,
            self.fs().unlink(parent.0, name.as_bytes()),
        );
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.empty(
            "rmdir",
            parent.0,
            reply,
            self.fs().rmdir(parent.0, name.as_bytes()),
        );
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let target = target.as_os_str().as_bytes();
        let made = self.make(
            req,
            parent,
            link_name,
            FileType::Symlink,
            0o777,
            Some(target),
            0,
        );
        self.entry("symlink", parent.0, reply, made);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let fs = self.fs();
        if flags.contains(RenameFlags::RENAME_EXCHANGE)
            || flags.contains(RenameFlags::RENAME_WHITEOUT)
        {
            return reply.error(fuser::Errno::EINVAL);
        }
        let (from, to) = (name.as_bytes(), newname.as_bytes());
        let result = if flags.contains(RenameFlags::RENAME_NOREPLACE) {
            fs.rename_noreplace(parent.0, from, newparent.0, to)
        } else {
            fs.rename(parent.0, from, newparent.0, to)
        };
        self.empty("rename", parent.0, reply, result);
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.entry(
            "link",
            ino.0,
            reply,
            self.fs()
                .link_pinned(ino.0, newparent.0, newname.as_bytes()),
        );
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.fs().open_inode(ino.0) {
            Ok(_) => reply.opened(FileHandle(ino.0), FopenFlags::empty()),
            Err(e) => reply.error(self.failed("open", ino.0, e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let mut buf = vec![0u8; size as usize];
        match self.fs().read(ino.0, offset, &mut buf) {
            Ok(n) => reply.data(&buf[..n]),
            Err(e) => reply.error(self.failed("read", ino.0, e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        // The library writes a prefix when space runs out (a short write, `ENOSPC` only
        // when not one byte fits). A program's own write takes the short count, as from any
        // file system. A write the kernel sends from its page cache (`--writeback-cache`)
        // has no program to return it to: the kernel takes any count for the whole request,
        // and `fsync` would succeed with the rest lost. So that one is finished or failed:
        // the rest is written again, and the error that stops it (`ENOSPC`) is the answer,
        // which marks the file's pages failed for `fsync` to report.
        let from_cache = write_flags.contains(WriteFlags::FUSE_WRITE_CACHE);
        let mut done = 0;
        let result = loop {
            match self.fs().write(ino.0, offset + done as u64, &data[done..]) {
                Ok(n) => {
                    done += n;
                    if done == data.len() || !from_cache {
                        break Ok(done);
                    }
                    if n == 0 {
                        break Err(pmfs::Errno::ENOSPC);
                    }
                }
                Err(e) => break Err(e),
            }
        };
        match result {
            Ok(n) => reply.written(u32::try_from(n).unwrap_or(u32::MAX)),
            Err(e) => reply.error(self.failed("write", ino.0, e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.empty("release", ino.0, reply, self.fs().release_inode(ino.0));
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let fs = self.fs();
        match fs.getattr(ino.0) {
            Ok(attr) if attr.kind != FileType::Directory => reply.error(fuser::Errno::ENOTDIR),
            Ok(_) => match fs.open_inode(ino.0) {
                Ok(_) => reply.opened(FileHandle(ino.0), FopenFlags::empty()),
                Err(e) => reply.error(self.failed("opendir", ino.0, e)),
            },
            Err(e) => reply.error(self.failed("opendir", ino.0, e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let entries = match self.fs().readdir(ino.0) {
            Ok(entries) => entries,
            Err(e) => return reply.error(self.failed("readdir", ino.0, e)),
        };
        for entry in entries.iter().filter(|e| e.cookie > offset) {
            let name = OsStr::from_bytes(&entry.name);
            if reply.add(INodeNo(entry.ino), entry.cookie, kind(entry.kind), name) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.empty("releasedir", ino.0, reply, self.fs().release_inode(ino.0));
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        const FALLOC_FL_KEEP_SIZE: i32 = 1;
        let keep = match mode {
            0 => false,
            FALLOC_FL_KEEP_SIZE => true,
            _ => return reply.error(fuser::Errno::EOPNOTSUPP),
        };
        self.empty(
            "fallocate",
            ino.0,
            reply,
            self.fs().fallocate(ino.0, offset, length, keep),
        );
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let mode = match flags {
            0 => SetMode::Any,
            libc_flags::XATTR_CREATE => SetMode::Create,
            libc_flags::XATTR_REPLACE => SetMode::Replace,
            _ => return reply.error(fuser::Errno::EINVAL),
        };
        self.empty(
            "setxattr",
            ino.0,
            reply,
            self.fs().setxattr(ino.0, name.as_bytes(), value, mode),
        );
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        match self.fs().getxattr(ino.0, name.as_bytes()) {
            Ok(value) => xattr_reply(reply, &value, size),
            Err(e) => reply.error(self.failed("getxattr", ino.0, e)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        match self.fs().listxattr(ino.0) {
            Ok(names) => {
                let list: Vec<u8> = names
                    .into_iter()
                    .flat_map(|mut n| {
                        n.push(0);
                        n
                    })
                    .collect();
                xattr_reply(reply, &list, size);
            }
            Err(e) => reply.error(self.failed("listxattr", ino.0, e)),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.empty(
            "removexattr",
            ino.0,
            reply,
            self.fs().removexattr(ino.0, name.as_bytes()),
        );
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let st = self.fs().statfs();
        reply.statfs(
            st.blocks,
            st.free_blocks,
            st.free_blocks,
            st.inodes,
            st.free_inodes,
            st.block_size,
            st.name_max,
            st.block_size,
        );
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // The kernel checks permissions itself (`default_permissions`).
        reply.ok();
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let made = self
            .make(req, parent, name, FileType::Regular, mode, None, 0)
            .and_then(|attr| self.fs().open_inode(attr.ino));
        match made {
            Ok(attr) => reply.created(
                &self.ttl,
                &file_attr(&attr),
                Generation(u64::from(attr.generation)),
                FileHandle(attr.ino),
                FopenFlags::empty(),
            ),
            Err(e) => reply.error(self.failed("create", parent.0, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_the_format_cannot_hold_are_refused_not_clamped() {
        let at = |t| time_set(TimeOrNow::SpecificTime(t));
        let before_1970 = UNIX_EPOCH - Duration::from_secs(10 * 365 * 86_400);
        assert_eq!(at(before_1970), Err(fuser::Errno::EINVAL));
        let after_2554 = UNIX_EPOCH + Duration::from_nanos(u64::MAX) + Duration::from_secs(1);
        assert_eq!(at(after_2554), Err(fuser::Errno::EINVAL));
        assert_eq!(at(UNIX_EPOCH), Ok(TimeSet::At(0)));
        let last = UNIX_EPOCH + Duration::from_nanos(u64::MAX);
        assert_eq!(at(last), Ok(TimeSet::At(u64::MAX)));
        assert_eq!(time_set(TimeOrNow::Now), Ok(TimeSet::Now));
    }
}
