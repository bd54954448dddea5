//! Differential testing: random operation sequences run on the file system (library API on
//! the simulator), on an in-memory model, and on a real tmpfs directory of the host (ground
//! truth for Linux semantics and errno values). Every result must agree, the file system must
//! pass fsck after every sequence, and a remount (from the durable image only, as after a
//! crash at that moment) must change nothing.

use crashsim::{SimConfig, SimPm};
use pmem::Pool;
use pmfs::posix::{O_CREAT, O_RDONLY, O_RDWR, O_WRONLY};
use pmfs::{Clock, DataMode, Errno, Fd, FileType, Fs, MkfsOptions, MountOptions, Posix};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;

const SLOTS: usize = 3;

#[derive(Clone, Debug)]
enum Op {
    Mkdir(String),
    Rmdir(String),
    Create(String),
    Unlink(String),
    Rename(String, String),
    Link(String, String),
    Symlink(String, String),
    Readlink(String),
    Write(String, u64, usize, u8),
    Read(String, u64, usize),
    Truncate(String, u64),
    Chmod(String, u32),
    Stat(String),
    Lstat(String),
    Readdir(String),
    Open(usize, String, bool),
    Close(usize),
    Pwrite(usize, u64, usize, u8),
    Pread(usize, u64, usize),
    Ftruncate(usize, u64),
    Fstat(usize),
    Remount,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct StatV {
    kind: FileType,
    /// Not compared for directories (tmpfs reports its own sizes).
    size: Option<u64>,
    nlink: u32,
    perm: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Value {
    Unit,
    Bytes(Vec<u8>),
    Stat(StatV),
    Names(Vec<Vec<u8>>),
}

type Outcome = Result<Value, i32>;

fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_add((i % 251) as u8) | 1)
        .collect()
}

// ---------------------------------------------------------------- the file system under test

struct FsTarget {
    px: Option<Posix<SimPm>>,
    mode: DataMode,
    slots: [Option<Fd>; SLOTS],
}

fn mount_options(mode: DataMode) -> MountOptions {
    MountOptions {
        data_mode: mode,
        clock: Clock::Fixed(7),
        ..MountOptions::default()
    }
}

impl FsTarget {
    fn new(mode: DataMode) -> Self {
        let size = 8 << 20;
        let pool = Pool::format(
            SimPm::new(size, SimConfig::default()),
            &pmfs::pool_options(size),
        )
        .expect("pool");
        let options = MkfsOptions {
            inodes: Some(128),
            journal_entries: 256,
            ..MkfsOptions::default()
        };
        let fs = Fs::mkfs(pool, &options, mount_options(mode)).expect("mkfs");
        FsTarget {
            px: Some(Posix::new(fs)),
            mode,
            slots: [None; SLOTS],
        }
    }

    fn px(&self) -> &Posix<SimPm> {
        self.px.as_ref().expect("mounted")
    }

    fn stat(a: pmfs::Attr) -> Value {
        Value::Stat(StatV {
            kind: a.kind,
            size: (a.kind != FileType::Directory).then_some(a.size),
            nlink: a.nlink,
            perm: a.perm,
        })
    }

    fn remount(&mut self) {
        self.slots = [None; SLOTS];
        let fs = self.px.take().expect("mounted").into_fs();
        let image = fs.pool().pm().durable_image();
        fs.abandon();
        let pm = SimPm::from_image(image, SimConfig::default());
        let pool = Pool::attach(pm, pmfs::LAYOUT).expect("attach");
        self.px = Some(Posix::new(
            Fs::mount(pool, mount_options(self.mode)).expect("mount"),
        ));
    }

    fn apply(&mut self, op: &Op) -> Outcome {
        let unit = |r: Result<(), Errno>| r.map(|()| Value::Unit).map_err(Errno::raw);
        if let Op::Remount = op {
            self.remount();
            return Ok(Value::Unit);
        }
        if let Op::Open(slot, path, write) = op {
            if let Some(fd) = self.slots[*slot].take() {
                self.px().close(fd).expect("close");
            }
            let flags = if *write { O_RDWR } else { O_RDONLY };
            let fd = self.px().open(path, flags, 0).map_err(Errno::raw)?;
            self.slots[*slot] = Some(fd);
            return Ok(Value::Unit);
        }
        if let Op::Close(slot) = op {
            let fd = self.slots[*slot].take().ok_or(libc::EBADF)?;
            return unit(self.px().close(fd));
        }
        let px = self.px();
        let fd = |slot: &usize| self.slots[*slot].ok_or(libc::EBADF);
        match op {
            Op::Mkdir(p) => unit(px.mkdir(p, 0o755)),
            Op::Rmdir(p) => unit(px.rmdir(p)),
            Op::Create(p) => {
                let fd = px.open(p, O_CREAT | O_WRONLY, 0o644).map_err(Errno::raw)?;
                unit(px.close(fd))
            }
            Op::Unlink(p) => unit(px.unlink(p)),
            Op::Rename(a, b) => unit(px.rename(a, b)),
            Op::Link(a, b) => unit(px.link(a, b)),
            Op::Symlink(t, p) => unit(px.symlink(t, p)),
            Op::Readlink(p) => px.readlink(p).map(Value::Bytes).map_err(Errno::raw),
            Op::Write(p, off, len, seed) => {
                let fd = px.open(p, O_WRONLY, 0).map_err(Errno::raw)?;
                let r = px.pwrite(fd, &data(*len, *seed), *off);
                px.close(fd).expect("close");
                r.map(|_| Value::Unit).map_err(Errno::raw)
            }
            Op::Read(p, off, len) => {
                let fd = px.open(p, O_RDONLY, 0).map_err(Errno::raw)?;
                let mut buf = vec![0u8; *len];
                let r = px.pread(fd, &mut buf, *off);
                px.close(fd).expect("close");
                let n = r.map_err(Errno::raw)?;
                buf.truncate(n);
                Ok(Value::Bytes(buf))
            }
            Op::Truncate(p, len) => unit(px.truncate(p, *len)),
            Op::Chmod(p, perm) => unit(px.chmod(p, *perm)),
            Op::Stat(p) => px.stat(p).map(Self::stat).map_err(Errno::raw),
            Op::Lstat(p) => px.lstat(p).map(Self::stat).map_err(Errno::raw),
            Op::Readdir(p) => px
                .readdir(p)
                .map(|entries| {
                    let mut names: Vec<Vec<u8>> = entries
                        .into_iter()
                        .map(|e| e.name)
                        .filter(|n| n != b"." && n != b"..")
                        .collect();
                    names.sort();
                    Value::Names(names)
                })
                .map_err(Errno::raw),
            Op::Pwrite(slot, off, len, seed) => px
                .pwrite(fd(slot)?, &data(*len, *seed), *off)
                .map(|_| Value::Unit)
                .map_err(Errno::raw),
            Op::Pread(slot, off, len) => {
                let mut buf = vec![0u8; *len];
                let n = px.pread(fd(slot)?, &mut buf, *off).map_err(Errno::raw)?;
                buf.truncate(n);
                Ok(Value::Bytes(buf))
            }
            Op::Ftruncate(slot, len) => unit(px.ftruncate(fd(slot)?, *len)),
            Op::Fstat(slot) => px.fstat(fd(slot)?).map(Self::stat).map_err(Errno::raw),
            Op::Open(..) | Op::Close(_) | Op::Remount => unreachable!(),
        }
    }
}

// ---------------------------------------------------------------- the host's tmpfs

struct Host {
    root: tempfile::TempDir,
    slots: [Option<std::fs::File>; SLOTS],
}

impl Host {
    fn new() -> Self {
        let root = tempfile::Builder::new()
            .prefix("ferrite-fs-diff")
            .tempdir_in("/dev/shm")
            .expect("tempdir");
        Host {
            root,
            slots: [None, None, None],
        }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.root.path().join(p.trim_start_matches('/'))
    }

    fn stat(m: std::fs::Metadata) -> Value {
        let t = m.file_type();
        let kind = if t.is_dir() {
            FileType::Directory
        } else if t.is_symlink() {
            FileType::Symlink
        } else {
            FileType::Regular
        };
        Value::Stat(StatV {
            kind,
            size: (kind != FileType::Directory).then_some(m.len()),
            nlink: m.nlink() as u32,
            perm: m.mode() & 0o7777,
        })
    }

    fn read_at(file: &std::fs::File, off: u64, len: usize) -> Outcome {
        let mut buf = vec![0u8; len];
        let mut got = 0;
        while got < len {
            match file.read_at(&mut buf[got..], off + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) => return Err(errno(e)),
            }
        }
        buf.truncate(got);
        Ok(Value::Bytes(buf))
    }

    fn apply(&mut self, op: &Op) -> Outcome {
        use std::fs;
        let unit = |r: std::io::Result<()>| r.map(|()| Value::Unit).map_err(errno);
        match op {
            Op::Remount => {
                self.slots = [None, None, None];
                Ok(Value::Unit)
            }
            Op::Mkdir(p) => unit(
                fs::DirBuilder::new()
                    .mode(0o755)
                    .create(self.path(p))
                    .and_then(|()| {
                        fs::set_permissions(self.path(p), fs::Permissions::from_mode(0o755))
                    }),
            ),
            Op::Rmdir(p) => unit(fs::remove_dir(self.path(p))),
            Op::Create(p) => {
                let existed = self.path(p).exists();
                let file = fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .mode(0o644)
                    .open(self.path(p))
                    .map_err(errno)?;
                if !existed {
                    file.set_permissions(fs::Permissions::from_mode(0o644))
                        .map_err(errno)?;
                }
                Ok(Value::Unit)
            }
            Op::Unlink(p) => unit(fs::remove_file(self.path(p))),
            Op::Rename(a, b) => unit(fs::rename(self.path(a), self.path(b))),
            Op::Link(a, b) => unit(fs::hard_link(self.path(a), self.path(b))),
            Op::Symlink(t, p) => unit(std::os::unix::fs::symlink(t, self.path(p))),
            Op::Readlink(p) => fs::read_link(self.path(p))
                .map(|t| Value::Bytes(t.into_os_string().into_encoded_bytes()))
                .map_err(errno),
            Op::Write(p, off, len, seed) => {
                let file = fs::OpenOptions::new()
                    .write(true)
                    .open(self.path(p))
                    .map_err(errno)?;
                file.write_all_at(&data(*len, *seed), *off)
                    .map(|()| Value::Unit)
                    .map_err(errno)
            }
            Op::Read(p, off, len) => {
                let file = fs::File::open(self.path(p)).map_err(errno)?;
                Self::read_at(&file, *off, *len)
            }
            Op::Truncate(p, len) => {
                let file = fs::OpenOptions::new()
                    .write(true)
                    .open(self.path(p))
                    .map_err(errno)?;
                unit(file.set_len(*len))
            }
            Op::Chmod(p, perm) => unit(fs::set_permissions(
                self.path(p),
                fs::Permissions::from_mode(*perm),
            )),
            Op::Stat(p) => fs::metadata(self.path(p)).map(Self::stat).map_err(errno),
            Op::Lstat(p) => fs::symlink_metadata(self.path(p))
                .map(Self::stat)
                .map_err(errno),
            Op::Readdir(p) => {
                let mut names = Vec::new();
                for entry in fs::read_dir(self.path(p)).map_err(errno)? {
                    names.push(entry.map_err(errno)?.file_name().into_encoded_bytes());
                }
                names.sort();
                Ok(Value::Names(names))
            }
            Op::Open(slot, p, write) => {
                self.slots[*slot] = None;
                let file = fs::OpenOptions::new()
                    .read(true)
                    .write(*write)
                    .open(self.path(p));
                self.slots[*slot] = Some(file.map_err(errno)?);
                Ok(Value::Unit)
            }
            Op::Close(slot) => self.slots[*slot]
                .take()
                .map(|_| Value::Unit)
                .ok_or(libc::EBADF),
            Op::Pwrite(slot, off, len, seed) => {
                let file = self.slots[*slot].as_ref().ok_or(libc::EBADF)?;
                file.write_all_at(&data(*len, *seed), *off)
                    .map(|()| Value::Unit)
                    .map_err(errno)
            }
            Op::Pread(slot, off, len) => {
                let file = self.slots[*slot].as_ref().ok_or(libc::EBADF)?;
                Self::read_at(file, *off, *len)
            }
            Op::Ftruncate(slot, len) => {
                let file = self.slots[*slot].as_ref().ok_or(libc::EBADF)?;
                unit(file.set_len(*len))
            }
            Op::Fstat(slot) => {
                let file = self.slots[*slot].as_ref().ok_or(libc::EBADF)?;
                file.metadata().map(Self::stat).map_err(errno)
            }
        }
    }
}

fn errno(e: std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(-1)
}

// ---------------------------------------------------------------- the in-memory model

#[derive(Clone, Debug)]
struct Node {
    kind: FileType,
    perm: u32,
    nlink: u32,
    data: Vec<u8>,
    entries: BTreeMap<Vec<u8>, u64>,
    parent: u64,
}

struct Model {
    nodes: BTreeMap<u64, Node>,
    next: u64,
    slots: [Option<(u64, bool)>; SLOTS],
}

const ROOT: u64 = 1;

struct Split {
    dir: u64,
    last: Option<Vec<u8>>,
    slash: bool,
}

impl Model {
    fn new() -> Self {
        let root = Node {
            kind: FileType::Directory,
            perm: 0o755,
            nlink: 2,
            data: Vec::new(),
            entries: BTreeMap::new(),
            parent: ROOT,
        };
        Model {
            nodes: BTreeMap::from([(ROOT, root)]),
            next: 2,
            slots: [None; SLOTS],
        }
    }

    fn node(&self, ino: u64) -> &Node {
        &self.nodes[&ino]
    }

    fn lookup(&self, dir: u64, name: &[u8]) -> Result<u64, i32> {
        let node = self.node(dir);
        if node.kind != FileType::Directory {
            return Err(libc::ENOTDIR);
        }
        match name {
            b"." => Ok(dir),
            b".." => Ok(node.parent),
            _ => node.entries.get(name).copied().ok_or(libc::ENOENT),
        }
    }

    fn split(&self, base: u64, path: &[u8], budget: &mut u32) -> Result<Split, i32> {
        let parts: Vec<&[u8]> = path
            .split(|&b| b == b'/')
            .filter(|c| !c.is_empty())
            .collect();
        let mut dir = if path.first() == Some(&b'/') {
            ROOT
        } else {
            base
        };
        let Some((last, walk)) = parts.split_last() else {
            return Ok(Split {
                dir,
                last: None,
                slash: false,
            });
        };
        for part in walk {
            let ino = self.follow(dir, part, true, budget)?;
            if self.node(ino).kind != FileType::Directory {
                return Err(libc::ENOTDIR);
            }
            dir = ino;
        }
        Ok(Split {
            dir,
            last: Some(last.to_vec()),
            slash: path.last() == Some(&b'/'),
        })
    }

    fn follow(&self, dir: u64, name: &[u8], follow: bool, budget: &mut u32) -> Result<u64, i32> {
        let ino = self.lookup(dir, name)?;
        let node = self.node(ino);
        if node.kind != FileType::Symlink || !follow {
            return Ok(ino);
        }
        if *budget == 0 {
            return Err(libc::ELOOP);
        }
        *budget -= 1;
        let target = node.data.clone();
        self.resolve_from(dir, &target, true, budget)
    }

    fn resolve_from(
        &self,
        base: u64,
        path: &[u8],
        follow: bool,
        budget: &mut u32,
    ) -> Result<u64, i32> {
        let s = self.split(base, path, budget)?;
        let Some(last) = s.last else { return Ok(s.dir) };
        let ino = self.follow(s.dir, &last, follow || s.slash, budget)?;
        if s.slash && self.node(ino).kind != FileType::Directory {
            return Err(libc::ENOTDIR);
        }
        Ok(ino)
    }

    fn resolve(&self, path: &str, follow: bool) -> Result<u64, i32> {
        self.resolve_from(ROOT, path.as_bytes(), follow, &mut 40)
    }

    fn parent_of(&self, path: &str) -> Result<Split, i32> {
        self.split(ROOT, path.as_bytes(), &mut 40)
    }

    fn is_open(&self, ino: u64) -> bool {
        self.slots.iter().any(|s| s.is_some_and(|(i, _)| i == ino))
    }

    fn add(&mut self, dir: u64, name: &[u8], kind: FileType, perm: u32, data: Vec<u8>) -> u64 {
        let ino = self.next;
        self.next += 1;
        let dir_kind = kind == FileType::Directory;
        self.nodes.insert(
            ino,
            Node {
                kind,
                perm,
                nlink: if dir_kind { 2 } else { 1 },
                data,
                entries: BTreeMap::new(),
                parent: dir,
            },
        );
        let parent = self.nodes.get_mut(&dir).expect("dir");
        parent.entries.insert(name.to_vec(), ino);
        parent.nlink += u32::from(dir_kind);
        ino
    }

    /// A removed (empty) directory has no links left; like a file, it lives on while a
    /// descriptor still names it (`fstat` of it then reports 0 links, as Linux does).
    fn drop_directory(&mut self, ino: u64) {
        self.nodes.get_mut(&ino).expect("directory").nlink = 0;
        if !self.is_open(ino) {
            self.nodes.remove(&ino);
        }
    }

    fn drop_link(&mut self, ino: u64) {
        let node = self.nodes.get_mut(&ino).expect("node");
        node.nlink -= 1;
        if node.nlink == 0 && !self.is_open(ino) {
            self.nodes.remove(&ino);
        }
    }

    fn stat(&self, ino: u64) -> Value {
        let n = self.node(ino);
        let size = match n.kind {
            FileType::Directory => None,
            _ => Some(n.data.len() as u64),
        };
        Value::Stat(StatV {
            kind: n.kind,
            size,
            nlink: n.nlink,
            perm: n.perm,
        })
    }

    fn create(&mut self, path: &str) -> Result<u64, i32> {
        let s = self.parent_of(path)?;
        if s.slash {
            return Err(libc::EISDIR);
        }
        let Some(mut name) = s.last else {
            return Err(libc::EISDIR);
        };
        let (mut dir, mut budget) = (s.dir, 40u32);
        loop {
            match self.lookup(dir, &name) {
                Ok(ino) if self.node(ino).kind == FileType::Symlink => {
                    if budget == 0 {
                        return Err(libc::ELOOP);
                    }
                    budget -= 1;
                    let target = self.node(ino).data.clone();
                    let t = self.split(dir, &target, &mut budget)?;
                    let Some(last) = t.last else {
                        return Err(libc::EISDIR);
                    };
                    (dir, name) = (t.dir, last);
                }
                Ok(ino) if self.node(ino).kind == FileType::Directory => return Err(libc::EISDIR),
                Ok(ino) => return Ok(ino),
                Err(libc::ENOENT) => {
                    return Ok(self.add(dir, &name, FileType::Regular, 0o644, Vec::new()));
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn is_ancestor_or_self(&self, anc: u64, mut ino: u64) -> bool {
        loop {
            if ino == anc {
                return true;
            }
            if ino == ROOT {
                return false;
            }
            ino = self.node(ino).parent;
        }
    }

    fn rename(&mut self, a: &str, b: &str) -> Result<(), i32> {
        let sa = self.parent_of(a)?;
        let sb = self.parent_of(b)?;
        let (Some(n1), Some(n2)) = (sa.last, sb.last) else {
            return Err(libc::EBUSY);
        };
        for n in [&n1, &n2] {
            if n.as_slice() == b"." || n.as_slice() == b".." {
                return Err(libc::EBUSY);
            }
        }
        let src = self.lookup(sa.dir, &n1)?;
        let src_dir = self.node(src).kind == FileType::Directory;
        if !src_dir && (sa.slash || sb.slash) {
            return Err(libc::ENOTDIR);
        }
        let dst = match self.lookup(sb.dir, &n2) {
            Ok(d) => Some(d),
            Err(libc::ENOENT) => None,
            Err(e) => return Err(e),
        };
        if sa.dir != sb.dir {
            if self.is_ancestor_or_self(src, sb.dir) {
                return Err(libc::EINVAL);
            }
            if dst.is_some_and(|d| self.is_ancestor_or_self(d, sa.dir)) {
                return Err(libc::ENOTEMPTY);
            }
        }
        if dst == Some(src) {
            return Ok(());
        }
        if let Some(d) = dst {
            let dst_dir = self.node(d).kind == FileType::Directory;
            if src_dir && !dst_dir {
                return Err(libc::ENOTDIR);
            }
            if !src_dir && dst_dir {
                return Err(libc::EISDIR);
            }
            if dst_dir && !self.node(d).entries.is_empty() {
                return Err(libc::ENOTEMPTY);
            }
        }
        if let Some(d) = dst {
            if self.node(d).kind == FileType::Directory {
                self.drop_directory(d);
                self.nodes.get_mut(&sb.dir).expect("dir").nlink -= 1;
            } else {
                self.drop_link(d);
            }
        }
        self.nodes
            .get_mut(&sa.dir)
            .expect("dir")
            .entries
            .remove(&n1);
        self.nodes
            .get_mut(&sb.dir)
            .expect("dir")
            .entries
            .insert(n2, src);
        if src_dir && sa.dir != sb.dir {
            self.nodes.get_mut(&src).expect("src").parent = sb.dir;
            self.nodes.get_mut(&sa.dir).expect("dir").nlink -= 1;
            self.nodes.get_mut(&sb.dir).expect("dir").nlink += 1;
        }
        Ok(())
    }

    fn write(&mut self, ino: u64, off: u64, bytes: &[u8]) -> Result<(), i32> {
        let node = self.nodes.get_mut(&ino).expect("node");
        if node.kind == FileType::Directory {
            return Err(libc::EISDIR);
        }
        let end = off as usize + bytes.len();
        if node.data.len() < end {
            node.data.resize(end, 0);
        }
        node.data[off as usize..end].copy_from_slice(bytes);
        Ok(())
    }

    fn read(&self, ino: u64, off: u64, len: usize) -> Outcome {
        let node = self.node(ino);
        if node.kind == FileType::Directory {
            return Err(libc::EISDIR);
        }
        let start = (off as usize).min(node.data.len());
        let end = (start + len).min(node.data.len());
        Ok(Value::Bytes(node.data[start..end].to_vec()))
    }

    fn truncate(&mut self, ino: u64, len: u64) -> Result<(), i32> {
        let node = self.nodes.get_mut(&ino).expect("node");
        if node.kind == FileType::Directory {
            return Err(libc::EISDIR);
        }
        node.data.resize(len as usize, 0);
        Ok(())
    }

    fn close(&mut self, slot: usize) -> Result<(), i32> {
        let (ino, _) = self.slots[slot].take().ok_or(libc::EBADF)?;
        if self.nodes.get(&ino).is_some_and(|n| n.nlink == 0) && !self.is_open(ino) {
            self.nodes.remove(&ino);
        }
        Ok(())
    }

    fn apply(&mut self, op: &Op) -> Outcome {
        let unit = |r: Result<(), i32>| r.map(|()| Value::Unit);
        match op {
            Op::Remount => {
                for slot in 0..SLOTS {
                    let _ = self.close(slot);
                }
                Ok(Value::Unit)
            }
            Op::Mkdir(p) => {
                let s = self.parent_of(p)?;
                let name = s.last.ok_or(libc::EEXIST)?;
                match self.lookup(s.dir, &name) {
                    Ok(_) => Err(libc::EEXIST),
                    Err(libc::ENOENT) => {
                        self.add(s.dir, &name, FileType::Directory, 0o755, Vec::new());
                        Ok(Value::Unit)
                    }
                    Err(e) => Err(e),
                }
            }
            Op::Rmdir(p) => {
                let s = self.parent_of(p)?;
                let name = s.last.ok_or(libc::EBUSY)?;
                match name.as_slice() {
                    b"." => return Err(libc::EINVAL),
                    b".." => return Err(libc::ENOTEMPTY),
                    _ => {}
                }
                let ino = self.lookup(s.dir, &name)?;
                if self.node(ino).kind != FileType::Directory {
                    return Err(libc::ENOTDIR);
                }
                if !self.node(ino).entries.is_empty() {
                    return Err(libc::ENOTEMPTY);
                }
                let parent = self.nodes.get_mut(&s.dir).expect("dir");
                parent.entries.remove(&name);
                parent.nlink -= 1;
                self.drop_directory(ino);
                Ok(Value::Unit)
            }
            Op::Create(p) => self.create(p).map(|_| Value::Unit),
            Op::Unlink(p) => {
                let s = self.parent_of(p)?;
                let name = s.last.ok_or(libc::EISDIR)?;
                let ino = self.lookup(s.dir, &name)?;
                if self.node(ino).kind == FileType::Directory {
                    return Err(libc::EISDIR);
                }
                if s.slash {
                    return Err(libc::ENOTDIR);
                }
                self.nodes
                    .get_mut(&s.dir)
                    .expect("dir")
                    .entries
                    .remove(&name);
                self.drop_link(ino);
                Ok(Value::Unit)
            }
            Op::Rename(a, b) => unit(self.rename(a, b)),
            Op::Link(a, b) => {
                let ino = self.resolve(a, false)?;
                let s = self.parent_of(b)?;
                let name = s.last.ok_or(libc::EEXIST)?;
                match self.lookup(s.dir, &name) {
                    Ok(_) => return Err(libc::EEXIST),
                    Err(libc::ENOENT) => {}
                    Err(e) => return Err(e),
                }
                if s.slash {
                    return Err(libc::ENOENT);
                }
                if self.node(ino).kind == FileType::Directory {
                    return Err(libc::EPERM);
                }
                self.nodes
                    .get_mut(&s.dir)
                    .expect("dir")
                    .entries
                    .insert(name, ino);
                self.nodes.get_mut(&ino).expect("node").nlink += 1;
                Ok(Value::Unit)
            }
            Op::Symlink(t, p) => {
                let s = self.parent_of(p)?;
                let name = s.last.ok_or(libc::EEXIST)?;
                match self.lookup(s.dir, &name) {
                    Ok(_) => Err(libc::EEXIST),
                    Err(libc::ENOENT) => {
                        self.add(
                            s.dir,
                            &name,
                            FileType::Symlink,
                            0o777,
                            t.as_bytes().to_vec(),
                        );
                        Ok(Value::Unit)
                    }
                    Err(e) => Err(e),
                }
            }
            Op::Readlink(p) => {
                let ino = self.resolve(p, false)?;
                let node = self.node(ino);
                if node.kind != FileType::Symlink {
                    return Err(libc::EINVAL);
                }
                Ok(Value::Bytes(node.data.clone()))
            }
            Op::Write(p, off, len, seed) => {
                let ino = self.resolve(p, true)?;
                unit(self.write(ino, *off, &data(*len, *seed)))
            }
            Op::Read(p, off, len) => {
                let ino = self.resolve(p, true)?;
                self.read(ino, *off, *len)
            }
            Op::Truncate(p, len) => {
                let ino = self.resolve(p, true)?;
                unit(self.truncate(ino, *len))
            }
            Op::Chmod(p, perm) => {
                let ino = self.resolve(p, true)?;
                self.nodes.get_mut(&ino).expect("node").perm = *perm;
                Ok(Value::Unit)
            }
            Op::Stat(p) => self.resolve(p, true).map(|ino| self.stat(ino)),
            Op::Lstat(p) => self.resolve(p, false).map(|ino| self.stat(ino)),
            Op::Readdir(p) => {
                let ino = self.resolve(p, true)?;
                let node = self.node(ino);
                if node.kind != FileType::Directory {
                    return Err(libc::ENOTDIR);
                }
                Ok(Value::Names(node.entries.keys().cloned().collect()))
            }
            Op::Open(slot, p, write) => {
                let _ = self.close(*slot);
                let ino = self.resolve(p, true)?;
                if *write && self.node(ino).kind == FileType::Directory {
                    return Err(libc::EISDIR);
                }
                self.slots[*slot] = Some((ino, *write));
                Ok(Value::Unit)
            }
            Op::Close(slot) => unit(self.close(*slot)),
            Op::Pwrite(slot, off, len, seed) => {
                let (ino, write) = self.slots[*slot].ok_or(libc::EBADF)?;
                if !write {
                    return Err(libc::EBADF);
                }
                unit(self.write(ino, *off, &data(*len, *seed)))
            }
            Op::Pread(slot, off, len) => {
                let (ino, _) = self.slots[*slot].ok_or(libc::EBADF)?;
                self.read(ino, *off, *len)
            }
            Op::Ftruncate(slot, len) => {
                let (ino, write) = self.slots[*slot].ok_or(libc::EBADF)?;
                if !write {
                    return Err(libc::EINVAL);
                }
                unit(self.truncate(ino, *len))
            }
            Op::Fstat(slot) => {
                let (ino, _) = self.slots[*slot].ok_or(libc::EBADF)?;
                Ok(self.stat(ino))
            }
        }
    }
}

// ---------------------------------------------------------------- generation and driver

/// Paths over a tiny namespace. `..` never climbs above the root: the host directory standing
/// in for the root has a parent, the file system's root does not. (Symbolic-link targets only
/// descend, so the real depth is never below the depth counted here.)
fn path() -> impl Strategy<Value = String> {
    let name = prop_oneof![4 => Just("a"), 4 => Just("b"), 4 => Just("c"), 1 => Just(".."), 1 => Just(".")];
    prop::collection::vec(name, 1..=3)
        .prop_filter("stays below the root", |parts| {
            let mut depth = 0i32;
            parts.iter().all(|p| {
                depth += match *p {
                    ".." => -1,
                    "." => 0,
                    _ => 1,
                };
                depth >= 0
            })
        })
        .prop_map(|parts| format!("/{}", parts.join("/")))
}

fn target() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("a".to_owned()),
        Just("b/c".to_owned()),
        Just("c".to_owned()),
        Just("b".to_owned()),
    ]
}

fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(4090),
        Just(4096),
        Just(8191),
        0u64..20_000,
        Just(2_100_000),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let len = 0usize..9000;
    let slot = 0usize..SLOTS;
    prop_oneof![
        3 => path().prop_map(Op::Mkdir),
        1 => path().prop_map(Op::Rmdir),
        3 => path().prop_map(Op::Create),
        1 => path().prop_map(Op::Unlink),
        2 => (path(), path()).prop_map(|(a, b)| Op::Rename(a, b)),
        1 => (path(), path()).prop_map(|(a, b)| Op::Link(a, b)),
        1 => (target(), path()).prop_map(|(t, p)| Op::Symlink(t, p)),
        1 => path().prop_map(Op::Readlink),
        3 => (path(), offset(), len.clone(), any::<u8>()).prop_map(|(p, o, l, s)| Op::Write(p, o, l, s)),
        2 => (path(), offset(), len.clone()).prop_map(|(p, o, l)| Op::Read(p, o, l)),
        1 => (path(), offset()).prop_map(|(p, l)| Op::Truncate(p, l)),
        1 => (path(), 0u32..0o100).prop_map(|(p, m)| Op::Chmod(p, 0o700 | m)),
        2 => path().prop_map(Op::Stat),
        1 => path().prop_map(Op::Lstat),
        1 => path().prop_map(Op::Readdir),
        2 => (slot.clone(), path(), any::<bool>()).prop_map(|(s, p, w)| Op::Open(s, p, w)),
        1 => slot.clone().prop_map(Op::Close),
        2 => (slot.clone(), offset(), len.clone(), any::<u8>()).prop_map(|(s, o, l, d)| Op::Pwrite(s, o, l, d)),
        1 => (slot.clone(), offset(), len).prop_map(|(s, o, l)| Op::Pread(s, o, l)),
        1 => (slot.clone(), offset()).prop_map(|(s, l)| Op::Ftruncate(s, l)),
        1 => slot.prop_map(Op::Fstat),
        1 => Just(Op::Remount),
    ]
}

/// Every path the generator can name, for the final tree comparison.
fn all_paths() -> Vec<String> {
    let names = ["a", "b", "c"];
    let mut out = Vec::new();
    for x in names {
        out.push(format!("/{x}"));
        for y in names {
            out.push(format!("/{x}/{y}"));
            for z in names {
                out.push(format!("/{x}/{y}/{z}"));
            }
        }
    }
    out
}

fn run(ops: &[Op], mode: DataMode) -> Result<(), TestCaseError> {
    let mut fs = FsTarget::new(mode);
    let mut model = Model::new();
    let mut host = Host::new();
    for (i, op) in ops.iter().enumerate() {
        let want = host.apply(op);
        let got = fs.apply(op);
        let modeled = model.apply(op);
        prop_assert_eq!(&got, &want, "op {} {:?}: file system vs tmpfs", i, op);
        prop_assert_eq!(&modeled, &want, "op {} {:?}: model vs tmpfs", i, op);
    }
    if let Err(c) = fs.px().fs().fsck() {
        return Err(TestCaseError::fail(format!("fsck: {}", c.0)));
    }
    fs.apply(&Op::Remount).expect("remount");
    model.apply(&Op::Remount).expect("close all");
    host.apply(&Op::Remount).expect("close all");
    if let Err(c) = fs.px().fs().fsck() {
        return Err(TestCaseError::fail(format!("fsck after remount: {}", c.0)));
    }
    for p in all_paths() {
        for probe in [
            Op::Lstat(p.clone()),
            Op::Read(p.clone(), 0, 1 << 22),
            Op::Readdir(p.clone()),
        ] {
            let want = host.apply(&probe);
            prop_assert_eq!(&fs.apply(&probe), &want, "final {:?}", probe);
            prop_assert_eq!(&model.apply(&probe), &want, "final model {:?}", probe);
        }
    }
    Ok(())
}

/// Found by the property test: a directory removed while a descriptor is open on it lives
/// on with no links until the descriptor is closed, as on tmpfs.
#[test]
fn fstat_of_an_open_directory_after_its_rmdir() {
    let ops = [
        Op::Mkdir("/c".into()),
        Op::Open(1, "/c".into(), false),
        Op::Rmdir("/c".into()),
        Op::Fstat(1),
    ];
    for mode in [DataMode::InPlace, DataMode::CopyOnWrite] {
        run(&ops, mode).expect("matches");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn in_place_mode_matches_model_and_tmpfs(ops in prop::collection::vec(op(), 1..60)) {
        run(&ops, DataMode::InPlace)?;
    }

    #[test]
    fn copy_on_write_mode_matches_model_and_tmpfs(ops in prop::collection::vec(op(), 1..60)) {
        run(&ops, DataMode::CopyOnWrite)?;
    }
}
