//! The FUSE floor: a file system that keeps names and sizes and throws data away, so a
//! `write` through it costs the kernel round trip and fuser's dispatch and nothing else.
//! The PMFS evaluation runs fio on it next to the real mount to show how much of a 4 KiB
//! write's time is FUSE's own (the bound no FUSE file system can beat on this machine).

use fuser::{
    FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite,
    Request, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::time::{Duration, SystemTime};

const ROOT: u64 = 1;
const TTL: Duration = Duration::from_secs(1);

/// Names (in one root directory) and file sizes; no data.
#[derive(Debug, Default)]
pub struct NullFs {
    state: Mutex<NullState>,
}

#[derive(Debug, Default)]
struct NullState {
    names: HashMap<OsString, u64>,
    sizes: HashMap<u64, u64>,
    next: u64,
}

fn attr(ino: u64, size: u64) -> FileAttr {
    let dir = ino == ROOT;
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: SystemTime::UNIX_EPOCH,
        mtime: SystemTime::UNIX_EPOCH,
        ctime: SystemTime::UNIX_EPOCH,
        crtime: SystemTime::UNIX_EPOCH,
        kind: if dir {
            FileType::Directory
        } else {
            FileType::RegularFile
        },
        perm: if dir { 0o777 } else { 0o666 },
        nlink: if dir { 2 } else { 1 },
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

impl NullFs {
    fn size(&self, ino: u64) -> Option<u64> {
        if ino == ROOT {
            return Some(0);
        }
        self.state.lock().sizes.get(&ino).copied()
    }
}

impl Filesystem for NullFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let state = self.state.lock();
        match state.names.get(name).filter(|_| parent.0 == ROOT) {
            Some(&ino) => reply.entry(&TTL, &attr(ino, state.sizes[&ino]), Generation(0)),
            None => reply.error(fuser::Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.size(ino.0) {
            Some(size) => reply.attr(&TTL, &attr(ino.0, size)),
            None => reply.error(fuser::Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut state = self.state.lock();
        if let (Some(size), Some(old)) = (size, state.sizes.get_mut(&ino.0)) {
            *old = size;
        }
        let size = state.sizes.get(&ino.0).copied().unwrap_or(0);
        reply.attr(&TTL, &attr(ino.0, size));
    }

    fn create(
        &self,
        _req: &Request,
        _parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let mut state = self.state.lock();
        state.next = state.next.max(ROOT) + 1;
        let ino = state.next;
        state.names.insert(name.to_owned(), ino);
        state.sizes.insert(ino, 0);
        reply.created(
            &TTL,
            &attr(ino, 0),
            Generation(0),
            FileHandle(ino),
            FopenFlags::empty(),
        );
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(ino.0), FopenFlags::empty());
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
        let end = self.size(ino.0).unwrap_or(0);
        let n = end.saturating_sub(offset).min(u64::from(size));
        reply.data(&vec![0u8; n as usize]);
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut state = self.state.lock();
        if let Some(size) = state.sizes.get_mut(&ino.0) {
            *size = (*size).max(offset + data.len() as u64);
        }
        reply.written(u32::try_from(data.len()).unwrap_or(u32::MAX));
    }

    fn unlink(&self, _req: &Request, _parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut state = self.state.lock();
        match state.names.remove(name) {
            Some(ino) => {
                state.sizes.remove(&ino);
                reply.ok();
            }
            None => reply.error(fuser::Errno::ENOENT),
        }
    }
}
