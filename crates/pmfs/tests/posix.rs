//! The POSIX-style API on the simulator backend: behaviour, errno values, persistence across
//! a remount, and fsck after every step.

use crashsim::{SimConfig, SimPm};
use pmem::{Persist, Pool};
use pmfs::posix::{O_APPEND, O_CREAT, O_DIRECTORY, O_EXCL, O_RDONLY, O_RDWR, O_TRUNC, O_WRONLY};
use pmfs::{
    Clock, DataMode, Errno, FileType, Fs, MkfsOptions, MountOptions, Posix, TimeSet, Whence,
};

const SIZE: u64 = 8 << 20;

fn options(mode: DataMode) -> MountOptions {
    MountOptions {
        data_mode: mode,
        clock: Clock::Fixed(1_000),
        ..MountOptions::default()
    }
}

fn new_fs(mode: DataMode) -> Posix<SimPm> {
    let pool = Pool::format(
        SimPm::new(SIZE, SimConfig::default()),
        &pmfs::pool_options(SIZE),
    )
    .expect("pool");
    Posix::new(Fs::mkfs(pool, &MkfsOptions::default(), options(mode)).expect("mkfs"))
}

/// Unmounts and mounts again from the durable image only (what a crash right now leaves).
fn remount(px: Posix<SimPm>, mode: DataMode) -> Posix<SimPm> {
    let fs = px.into_fs();
    let image = fs.pool().pm().durable_image();
    fs.abandon();
    let pool =
        Pool::attach(SimPm::from_image(image, SimConfig::default()), pmfs::LAYOUT).expect("attach");
    let fs = Fs::mount(pool, options(mode)).expect("mount");
    fs.fsck().expect("fsck after remount");
    Posix::new(fs)
}

fn read_all(px: &Posix<SimPm>, path: &str) -> Vec<u8> {
    let fd = px.open(path, O_RDONLY, 0).expect("open");
    let size = px.fstat(fd).expect("fstat").size as usize;
    let mut buf = vec![0u8; size + 10];
    let n = px.read(fd, &mut buf).expect("read");
    buf.truncate(n);
    px.close(fd).expect("close");
    buf
}

#[test]
fn files_directories_and_errors() {
    for mode in [DataMode::InPlace, DataMode::CopyOnWrite] {
        let px = new_fs(mode);
        px.mkdir("/a", 0o755).expect("mkdir");
        assert_eq!(px.mkdir("/a", 0o755), Err(Errno::EEXIST));
        assert_eq!(px.mkdir("/missing/b", 0o755), Err(Errno::ENOENT));
        let fd = px.open("/a/f", O_CREAT | O_RDWR, 0o644).expect("create");
        assert_eq!(
            px.open("/a/f", O_CREAT | O_EXCL | O_RDWR, 0o644),
            Err(Errno::EEXIST)
        );
        assert_eq!(px.mkdir("/a/f/x", 0o755), Err(Errno::ENOTDIR));
        assert_eq!(px.write(fd, b"hello").expect("write"), 5);
        assert_eq!(px.lseek(fd, 0, Whence::Set), Ok(0));
        let mut buf = [0u8; 16];
        assert_eq!(px.read(fd, &mut buf), Ok(5));
        assert_eq!(&buf[..5], b"hello");
        assert_eq!(px.read(fd, &mut buf), Ok(0), "at EOF");
        px.close(fd).expect("close");
        assert_eq!(px.close(fd), Err(Errno::EBADF));
        assert_eq!(px.rmdir("/a"), Err(Errno::ENOTEMPTY));
        assert_eq!(px.unlink("/a"), Err(Errno::EISDIR));
        assert_eq!(px.rmdir("/a/f"), Err(Errno::ENOTDIR));
        assert_eq!(px.open("/a", O_WRONLY, 0), Err(Errno::EISDIR));
        assert_eq!(
            px.open("/a/f", O_RDONLY | O_DIRECTORY, 0),
            Err(Errno::ENOTDIR)
        );
        let st = px.stat("/a").expect("stat");
        assert_eq!(
            (st.kind, st.nlink, st.perm),
            (FileType::Directory, 2, 0o755)
        );
        assert_eq!(px.stat("/a/f").expect("stat").size, 5);
        let names: Vec<Vec<u8>> = px
            .readdir("/a")
            .expect("readdir")
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names, vec![b".".to_vec(), b"..".to_vec(), b"f".to_vec()]);
        px.unlink("/a/f").expect("unlink");
        assert_eq!(px.stat("/a/f"), Err(Errno::ENOENT));
        px.rmdir("/a").expect("rmdir");
        assert_eq!(px.stat("/").expect("root").nlink, 2);
        px.fs().fsck().expect("fsck");
        let px = remount(px, mode);
        assert_eq!(px.readdir("/").expect("readdir").len(), 2);
    }
}

#[test]
fn writes_reads_holes_truncate_and_remount() {
    for mode in [DataMode::InPlace, DataMode::CopyOnWrite] {
        let px = new_fs(mode);
        let fd = px.open("/f", O_CREAT | O_RDWR, 0o600).expect("create");
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        assert_eq!(px.pwrite(fd, &data, 0), Ok(data.len()));
        // A hole, then a write past it.
        assert_eq!(px.pwrite(fd, b"tail", 5_000_000), Ok(4));
        let size = 5_000_004;
        assert_eq!(px.fstat(fd).expect("fstat").size, size);
        let mut buf = vec![0u8; 100];
        assert_eq!(px.pread(fd, &mut buf, 400_000), Ok(100));
        assert!(buf.iter().all(|&b| b == 0), "hole reads as zeros");
        // Unaligned overwrite across a block boundary.
        px.pwrite(fd, &[0xEE; 100], 4090).expect("overwrite");
        let mut expect = data.clone();
        expect[4090..4190].fill(0xEE);
        let mut got = vec![0u8; data.len()];
        px.pread(fd, &mut got, 0).expect("read back");
        assert_eq!(got, expect);
        // Shrink to an unaligned size, then grow: the old bytes past EOF read as zeros.
        px.ftruncate(fd, 5000).expect("shrink");
        px.ftruncate(fd, 20_000).expect("grow");
        let mut got = vec![0u8; 20_000];
        px.pread(fd, &mut got, 0).expect("read");
        assert_eq!(&got[..5000], &expect[..5000]);
        assert!(got[5000..].iter().all(|&b| b == 0));
        // A write past EOF inside the last block zeroes the gap too.
        px.ftruncate(fd, 100).expect("shrink");
        px.pwrite(fd, b"Z", 200).expect("write past EOF");
        let mut got = vec![0u8; 201];
        px.pread(fd, &mut got, 0).expect("read");
        assert_eq!(&got[..100], &expect[..100]);
        assert!(got[100..200].iter().all(|&b| b == 0));
        assert_eq!(got[200], b'Z');
        px.close(fd).expect("close");
        px.fs().fsck().expect("fsck");
        let before = px.fs().statfs().free_blocks;
        let px = remount(px, mode);
        assert_eq!(
            px.fs().statfs().free_blocks,
            before,
            "free space rebuilt exactly"
        );
        assert_eq!(read_all(&px, "/f"), got);
    }
}

#[test]
fn append_trunc_and_positions() {
    let px = new_fs(DataMode::InPlace);
    let fd = px
        .open("/log", O_CREAT | O_WRONLY | O_APPEND, 0o644)
        .expect("create");
    px.write(fd, b"one ").expect("write");
    px.lseek(fd, 0, Whence::Set).expect("seek");
    px.write(fd, b"two").expect("append ignores the position");
    px.close(fd).expect("close");
    assert_eq!(read_all(&px, "/log"), b"one two");
    let fd = px.open("/log", O_WRONLY | O_TRUNC, 0).expect("trunc");
    assert_eq!(px.fstat(fd).expect("fstat").size, 0);
    assert_eq!(px.read(fd, &mut [0u8; 4]), Err(Errno::EBADF), "write-only");
    px.close(fd).expect("close");
    let fd = px.open("/log", O_RDONLY, 0).expect("open");
    assert_eq!(px.write(fd, b"x"), Err(Errno::EBADF), "read-only");
    assert_eq!(px.ftruncate(fd, 0), Err(Errno::EINVAL));
    assert_eq!(px.lseek(fd, -1, Whence::Set), Err(Errno::EINVAL));
    assert_eq!(px.lseek(fd, 10, Whence::End), Ok(10));
    px.close(fd).expect("close");
}

#[test]
fn rename_cases() {
    let px = new_fs(DataMode::InPlace);
    px.mkdir("/d1", 0o755).expect("mkdir");
    px.mkdir("/d2", 0o755).expect("mkdir");
    px.mkdir("/d1/sub", 0o755).expect("mkdir");
    px.close(px.creat("/d1/f", 0o644).expect("creat"))
        .expect("close");
    px.close(px.creat("/d2/g", 0o644).expect("creat"))
        .expect("close");
    // File over file in another directory.
    px.rename("/d1/f", "/d2/g").expect("rename over");
    assert_eq!(px.stat("/d1/f"), Err(Errno::ENOENT));
    assert_eq!(px.stat("/d2/g").expect("stat").nlink, 1);
    // Directory into another directory: link counts move.
    px.rename("/d1/sub", "/d2/sub").expect("move dir");
    assert_eq!(px.stat("/d1").expect("d1").nlink, 2);
    assert_eq!(px.stat("/d2").expect("d2").nlink, 3);
    assert_eq!(
        px.stat("/d2/sub/..").expect("..").ino,
        px.stat("/d2").expect("d2").ino
    );
    // Errors.
    assert_eq!(
        px.rename("/d2", "/d2/sub/x"),
        Err(Errno::EINVAL),
        "into itself"
    );
    assert_eq!(px.rename("/d2/g", "/d2/sub"), Err(Errno::EISDIR));
    assert_eq!(px.rename("/d2/sub", "/d2/g"), Err(Errno::ENOTDIR));
    px.mkdir("/d1/full", 0o755).expect("mkdir");
    px.mkdir("/d1/full/x", 0o755).expect("mkdir");
    assert_eq!(px.rename("/d2/sub", "/d1/full"), Err(Errno::ENOTEMPTY));
    // Directory over an empty directory.
    px.rename("/d1/full/x", "/d2/sub")
        .expect("dir over empty dir");
    assert_eq!(px.stat("/d1/full").expect("full").nlink, 2);
    // Same-directory rename and a no-op rename of a hard link to itself.
    px.rename("/d2/g", "/d2/h").expect("same dir");
    px.link("/d2/h", "/d2/h2").expect("link");
    px.rename("/d2/h", "/d2/h2").expect("same inode: no-op");
    assert_eq!(px.stat("/d2/h").expect("still there").nlink, 2);
    px.fs().fsck().expect("fsck");
    let px = remount(px, DataMode::InPlace);
    assert_eq!(px.stat("/d2/h2").expect("h2").nlink, 2);
}

#[test]
fn links_symlinks_and_attributes() {
    let px = new_fs(DataMode::InPlace);
    px.mkdir("/d", 0o755).expect("mkdir");
    let fd = px.creat("/d/f", 0o644).expect("creat");
    px.write(fd, b"data").expect("write");
    px.close(fd).expect("close");
    px.link("/d/f", "/d/g").expect("link");
    assert_eq!(px.link("/d", "/e"), Err(Errno::EPERM));
    assert_eq!(px.stat("/d/g").expect("g").nlink, 2);
    px.symlink("f", "/d/s").expect("symlink");
    px.symlink("/d", "/top").expect("symlink to a dir");
    assert_eq!(px.readlink("/d/s").expect("readlink"), b"f");
    assert_eq!(px.lstat("/d/s").expect("lstat").kind, FileType::Symlink);
    assert_eq!(px.stat("/d/s").expect("stat").size, 4, "followed");
    assert_eq!(read_all(&px, "/top/s"), b"data", "through two links");
    px.symlink("loop2", "/loop1").expect("symlink");
    px.symlink("loop1", "/loop2").expect("symlink");
    assert_eq!(px.stat("/loop1"), Err(Errno::ELOOP));
    assert_eq!(px.symlink("", "/empty"), Err(Errno::ENOENT));
    px.chmod("/d/f", 0o600).expect("chmod");
    px.chown("/d/f", Some(7), Some(8)).expect("chown");
    px.utimens("/d/f", Some(TimeSet::At(5)), Some(TimeSet::At(6)))
        .expect("utimens");
    let st = px.stat("/d/g").expect("stat");
    assert_eq!(
        (st.perm, st.uid, st.gid, st.atime, st.mtime),
        (0o600, 7, 8, 5, 6)
    );
    px.unlink("/d/f").expect("unlink");
    assert_eq!(px.stat("/d/g").expect("g").nlink, 1);
    assert_eq!(read_all(&px, "/d/g"), b"data");
    px.fs().fsck().expect("fsck");
    remount(px, DataMode::InPlace);
}

#[test]
fn unlinked_open_file_lives_until_closed_and_is_freed_after_a_crash() {
    let px = new_fs(DataMode::InPlace);
    // The root directory's first block stays once allocated; make it exist first.
    px.close(px.creat("/keep", 0o644).expect("creat"))
        .expect("close");
    let free = px.fs().statfs().free_blocks;
    let fd = px.creat("/tmpfile", 0o644).expect("creat");
    px.write(fd, &vec![1u8; 100_000]).expect("write");
    px.unlink("/tmpfile").expect("unlink");
    assert_eq!(px.stat("/tmpfile"), Err(Errno::ENOENT));
    assert_eq!(px.fstat(fd).expect("fstat").nlink, 0);
    px.write(fd, b"more").expect("still writable");
    px.ftruncate(fd, 10).expect("truncate an orphan");
    assert_eq!(px.fs().fsck().expect("fsck").orphans, 1);
    // Crash now: recovery frees the orphan through the truncate list.
    let px = remount(px, DataMode::InPlace);
    assert_eq!(px.fs().statfs().free_blocks, free);
    // And the normal path: the last close frees it.
    let fd = px.creat("/t2", 0o644).expect("creat");
    px.write(fd, &vec![2u8; 50_000]).expect("write");
    px.unlink("/t2").expect("unlink");
    px.close(fd).expect("close");
    assert_eq!(px.fs().statfs().free_blocks, free);
    px.fs().fsck().expect("fsck");
}

#[test]
fn removed_open_directory_lives_until_closed_and_is_freed_after_a_crash() {
    for mode in [DataMode::InPlace, DataMode::CopyOnWrite] {
        let px = new_fs(mode);
        px.mkdir("/keep", 0o755).expect("mkdir");
        let (free_blocks, free_inodes) = {
            let st = px.fs().statfs();
            (st.free_blocks, st.free_inodes)
        };
        px.mkdir("/d", 0o755).expect("mkdir");
        let fd = px.open("/d", O_RDONLY | O_DIRECTORY, 0).expect("open");
        let ino = px.fstat(fd).expect("fstat").ino;
        px.rmdir("/d").expect("rmdir");
        assert_eq!(px.stat("/d"), Err(Errno::ENOENT));
        let st = px.fstat(fd).expect("fstat of the removed directory");
        assert_eq!((st.kind, st.nlink), (FileType::Directory, 0));
        // Nothing can be added to it, and it lists nothing, as on Linux.
        assert_eq!(
            px.fs().create(ino, b"f", 0o644).map(|_| ()),
            Err(Errno::ENOENT)
        );
        assert_eq!(
            px.fs().mkdir(ino, b"s", 0o755).map(|_| ()),
            Err(Errno::ENOENT)
        );
        let keep = px.stat("/keep").expect("stat").ino;
        assert_eq!(px.fs().rename(keep, b"x", ino, b"x"), Err(Errno::ENOENT));
        assert_eq!(px.fs().readdir(ino).map(|_| ()), Err(Errno::ENOENT));
        assert_eq!(px.fs().fsck().expect("fsck").orphans, 1);
        // Crash now: recovery frees it through the truncate list.
        let px = remount(px, mode);
        let st = px.fs().statfs();
        assert_eq!((st.free_blocks, st.free_inodes), (free_blocks, free_inodes));
        // And the normal path, through rmdir and through a rename over it: the last close
        // frees it.
        for replace in [false, true] {
            px.mkdir("/e", 0o755).expect("mkdir");
            let fd = px.open("/e", O_RDONLY | O_DIRECTORY, 0).expect("open");
            if replace {
                px.mkdir("/f", 0o755).expect("mkdir");
                px.rename("/f", "/e")
                    .expect("rename over an open directory");
                assert_eq!(px.fstat(fd).expect("fstat").nlink, 0);
                px.fs()
                    .fsck()
                    .expect("fsck with the replaced directory open");
                px.rmdir("/e").expect("rmdir");
            } else {
                px.rmdir("/e").expect("rmdir");
            }
            px.close(fd).expect("close");
            let st = px.fs().statfs();
            assert_eq!((st.free_blocks, st.free_inodes), (free_blocks, free_inodes));
            assert_eq!(px.fs().fsck().expect("fsck").orphans, 0);
        }
    }
}

#[test]
fn many_entries_span_directory_blocks() {
    let px = new_fs(DataMode::InPlace);
    px.mkdir("/big", 0o755).expect("mkdir");
    for i in 0..400 {
        let name = format!("/big/file-with-a-longish-name-{i:04}");
        px.close(px.creat(&name, 0o644).expect("creat"))
            .expect("close");
    }
    for i in (0..400).step_by(3) {
        px.unlink(&format!("/big/file-with-a-longish-name-{i:04}"))
            .expect("unlink");
    }
    for i in 0..50 {
        px.mkdir(&format!("/big/d{i}"), 0o755).expect("mkdir");
    }
    assert!(px.stat("/big").expect("big").size > 4096);
    assert_eq!(px.stat("/big").expect("big").nlink, 52);
    px.fs().fsck().expect("fsck");
    let px = remount(px, DataMode::InPlace);
    assert_eq!(px.readdir("/big").expect("readdir").len(), 2 + 266 + 50);
}

#[test]
fn out_of_space_is_enospc_and_leaves_a_consistent_fs() {
    let size = 1 << 20;
    let pool = Pool::format(
        SimPm::new(size, SimConfig::default()),
        &pmfs::pool_options(size),
    )
    .expect("pool");
    let px = Posix::new(
        Fs::mkfs(pool, &MkfsOptions::default(), options(DataMode::InPlace)).expect("mkfs"),
    );
    let fd = px.creat("/fill", 0o644).expect("creat");
    let mut total = 0;
    loop {
        match px.write(fd, &[7u8; 65536]) {
            Ok(n) => total += n,
            Err(e) => {
                assert_eq!(e, Errno::ENOSPC);
                break;
            }
        }
    }
    assert!(total > 0);
    px.fs().fsck().expect("fsck when full");
    px.ftruncate(fd, 0).expect("truncate");
    px.close(fd).expect("close");
    px.fs().fsck().expect("fsck after freeing");
    let _ = px.fs().pool().pm().len();
}

/// ENOSPC means full: large writes fill the file system to its last blocks (a write that
/// does not fit is short, not refused), whatever the write size.
#[test]
fn enospc_means_full() {
    for chunk in [4096usize, 128 << 10, 1 << 20] {
        let size = 8 << 20;
        let pool = Pool::format(
            SimPm::new(size, SimConfig::default()),
            &pmfs::pool_options(size),
        )
        .expect("pool");
        let px = Posix::new(
            Fs::mkfs(pool, &MkfsOptions::default(), options(DataMode::InPlace)).expect("mkfs"),
        );
        let fd = px.creat("/fill", 0o644).expect("creat");
        let data = vec![7u8; chunk];
        let mut total = 0u64;
        let error = loop {
            match px.write(fd, &data) {
                Ok(n) => total += n as u64,
                Err(e) => break e,
            }
        };
        assert_eq!(error, Errno::ENOSPC);
        let free = px.fs().statfs().free_blocks;
        assert!(
            free <= 2,
            "{chunk}-byte writes: ENOSPC with {free} blocks free"
        );
        assert_eq!(
            px.fstat(fd).expect("fstat").size,
            total,
            "short writes counted"
        );
        px.fs().fsck().expect("fsck when full");
    }
}

/// Emptying a directory gives its blocks back (the root included, which cannot be
/// removed), and a partly emptied one gives back its emptied tail.
#[test]
fn emptied_directories_give_their_blocks_back() {
    let px = new_fs(DataMode::InPlace);
    let free = px.fs().statfs().free_blocks;
    px.mkdir("/sub", 0o755).expect("mkdir");
    // 240 names of 100 bytes each: 8 blocks per directory (inodes: 512 in this pool).
    let names: Vec<String> = (0..240)
        .map(|i| format!("{i:06}{}", "n".repeat(94)))
        .collect();
    for dir in ["", "/sub"] {
        for name in &names {
            let fd = px.creat(&format!("{dir}/{name}"), 0o644).expect("create");
            px.close(fd).expect("close");
        }
    }
    let blocks = |path: &str| px.stat(path).expect("stat").blocks / 8;
    assert!(blocks("/") >= 7 && blocks("/sub") >= 7);
    for name in &names[names.len() / 2..] {
        px.unlink(&format!("/sub/{name}")).expect("unlink");
    }
    let half = blocks("/sub");
    assert!((3..=5).contains(&half), "{half}");
    for name in &names {
        px.unlink(&format!("/{name}")).expect("unlink");
    }
    for name in &names[..names.len() / 2] {
        px.unlink(&format!("/sub/{name}")).expect("unlink");
    }
    assert_eq!(blocks("/sub"), 0);
    px.rmdir("/sub").expect("rmdir");
    assert_eq!(blocks("/"), 0);
    assert_eq!(px.fs().statfs().free_blocks, free, "every block is back");
    px.fs().fsck().expect("fsck");
    let px = remount(px, DataMode::InPlace);
    assert_eq!(px.fs().statfs().free_blocks, free);
}

#[test]
fn extended_attributes_persist_and_go_with_their_file() {
    use pmfs::SetMode;
    let px = new_fs(DataMode::InPlace);
    let free = px.fs().statfs().free_blocks;
    let fd = px.creat("/f", 0o644).expect("create");
    px.close(fd).expect("close");
    px.symlink("f", "/l").expect("symlink");
    px.setxattr("/f", b"user.a", b"one", SetMode::Any, true)
        .expect("set");
    px.setxattr("/f", b"security.selinux", &[9; 200], SetMode::Any, true)
        .expect("set");
    assert_eq!(px.getxattr("/f", b"user.a", true), Ok(b"one".to_vec()));
    assert_eq!(
        px.getxattr("/l", b"user.a", true),
        Ok(b"one".to_vec()),
        "followed"
    );
    assert_eq!(
        px.getxattr("/l", b"user.a", false),
        Err(Errno::ENODATA),
        "not followed"
    );
    assert_eq!(
        px.setxattr("/l", b"user.x", b"v", SetMode::Any, false),
        Err(Errno::EPERM),
        "user. names only on files and directories"
    );
    assert_eq!(px.getxattr("/f", b"user.none", true), Err(Errno::ENODATA));
    assert_eq!(
        px.setxattr("/f", b"trusted.x", b"v", SetMode::Any, true),
        Err(Errno::EOPNOTSUPP)
    );
    assert_eq!(
        px.setxattr("/f", b"user.a", b"v", SetMode::Create, true),
        Err(Errno::EEXIST)
    );
    assert_eq!(
        px.setxattr("/f", b"user.b", b"v", SetMode::Replace, true),
        Err(Errno::ENODATA)
    );
    px.setxattr("/f", b"user.a", b"two", SetMode::Replace, true)
        .expect("replace");
    assert_eq!(
        px.setxattr("/f", b"user.big", &[1; 5000], SetMode::Any, true),
        Err(Errno::ENOSPC),
        "one attribute block per inode"
    );
    px.fs().fsck().expect("fsck");
    let px = remount(px, DataMode::InPlace);
    let mut names = px.listxattr("/f", true).expect("list");
    names.sort();
    assert_eq!(
        names,
        vec![b"security.selinux".to_vec(), b"user.a".to_vec()]
    );
    assert_eq!(px.getxattr("/f", b"user.a", true), Ok(b"two".to_vec()));
    px.removexattr("/f", b"user.a", true).expect("remove");
    assert_eq!(px.removexattr("/f", b"user.a", true), Err(Errno::ENODATA));
    px.unlink("/f").expect("unlink");
    px.unlink("/l").expect("unlink");
    assert_eq!(
        px.fs().statfs().free_blocks,
        free,
        "the attribute block went with the file"
    );
    px.fs().fsck().expect("fsck");
}

#[test]
fn fallocate_reserves_zeroed_blocks_with_or_without_the_size() {
    let px = new_fs(DataMode::InPlace);
    let ino = |px: &Posix<SimPm>| px.stat("/f").expect("stat").ino;
    let fd = px.creat("/f", 0o644).expect("create");
    px.write(fd, b"head").expect("write");
    px.close(fd).expect("close");
    let free = px.fs().statfs().free_blocks;
    px.fs()
        .fallocate(ino(&px), 0, 40_000, false)
        .expect("fallocate");
    let st = px.stat("/f").expect("stat");
    assert_eq!(st.size, 40_000, "mode 0 grows the file");
    assert_eq!(
        free - px.fs().statfs().free_blocks,
        10,
        "9 more leaves and a tree node"
    );
    assert_eq!(read_all(&px, "/f")[..6], *b"head\0\0");
    px.fs()
        .fallocate(ino(&px), 40_000, 100_000, true)
        .expect("keep size");
    assert_eq!(
        px.stat("/f").expect("stat").size,
        40_000,
        "KEEP_SIZE keeps it"
    );
    let reserved = free - px.fs().statfs().free_blocks;
    assert!(reserved >= 34, "{reserved}");
    px.fs()
        .fsck()
        .expect("fsck: blocks past the size are allowed for this file");
    let px = remount(px, DataMode::InPlace);
    assert_eq!(
        free - px.fs().statfs().free_blocks,
        reserved,
        "kept across a remount"
    );
    // Writing into reserved space allocates nothing more.
    let fd = px.open("/f", O_RDWR, 0).expect("open");
    px.pwrite(fd, &[5; 8192], 90_000).expect("write");
    px.close(fd).expect("close");
    assert_eq!(free - px.fs().statfs().free_blocks, reserved);
    let data = read_all(&px, "/f");
    assert!(data[40_000..90_000].iter().all(|&b| b == 0));
    px.truncate("/f", 10).expect("truncate");
    assert_eq!(
        free - px.fs().statfs().free_blocks,
        1,
        "truncate gives the reserved blocks back (the tree node stays: heights do not shrink)"
    );
    px.mkdir("/d", 0o755).expect("mkdir");
    let d = px.stat("/d").expect("stat").ino;
    assert_eq!(px.fs().fallocate(d, 0, 10, false), Err(Errno::EISDIR));
    let f = ino(&px);
    assert_eq!(px.fs().fallocate(f, 0, 0, false), Err(Errno::EINVAL));
    assert_eq!(px.fs().fallocate(f, 0, 1 << 40, false), Err(Errno::ENOSPC));
    px.fs().fsck().expect("fsck after a refused fallocate");
}

fn new_fs_of_version(version: u32) -> Posix<SimPm> {
    let pool = Pool::format(
        SimPm::new(SIZE, SimConfig::default()),
        &pmfs::pool_options(SIZE),
    )
    .expect("pool");
    let mkfs = MkfsOptions {
        version,
        ..MkfsOptions::default()
    };
    Posix::new(Fs::mkfs(pool, &mkfs, options(DataMode::InPlace)).expect("mkfs"))
}

/// Sets the version in both superblock slots (with valid checksums).
fn rewrite_version(fs: &Fs<SimPm>, version: u32) {
    let mut sb = fs.superblock().clone();
    sb.version = version;
    let bytes = sb.encode();
    for slot in [pmfs::layout::SB_PRIMARY, pmfs::layout::SB_COPY] {
        let at = sb.root_offset + slot;
        fs.pool().pm().write(at, &bytes, pmem::WriteClass::Meta);
        fs.pool().pm().persist(at, bytes.len() as u64);
    }
}

/// Version-1 and version-2 file systems (plain inode words; version 1 without attribute
/// blocks) are still read and written in their own format; attributes are refused on
/// version 1. A version this build does not know is a typed error.
#[test]
fn older_version_images_are_read_and_unknown_versions_refused() {
    for version in [1, 2] {
        let px = new_fs_of_version(version);
        let fd = px.creat("/old", 0o644).expect("create");
        px.write(fd, b"written by an older version").expect("write");
        px.close(fd).expect("close");
        px.mkdir("/dir", 0o755).expect("mkdir");
        let px = remount(px, DataMode::InPlace);
        assert_eq!(px.fs().superblock().version, version);
        assert_eq!(read_all(&px, "/old"), b"written by an older version");
        px.rename("/old", "/dir/new").expect("rename");
        px.truncate("/dir/new", 7).expect("truncate");
        let px = remount(px, DataMode::InPlace);
        assert_eq!(read_all(&px, "/dir/new"), b"written");
        px.fs().fsck().expect("fsck");
        let attrs = px.setxattr("/dir/new", b"user.a", b"v", pmfs::SetMode::Any, true);
        if version == 1 {
            assert_eq!(attrs, Err(Errno::EOPNOTSUPP));
            assert_eq!(px.listxattr("/dir/new", true), Ok(Vec::new()));
        } else {
            assert_eq!(attrs, Ok(()));
        }
        // The inode words are plain integers: the file's size is readable as one.
        let fs = px.into_fs();
        let dir = fs.lookup(1, b"dir").expect("dir").ino;
        let ino = fs.lookup(dir, b"new").expect("file").ino;
        let at = fs.superblock().inode_offset(ino) + pmfs::inode::field::SIZE;
        assert_eq!(fs.pool().pm().read_u64(at), 7, "version {version}");
        fs.abandon();
    }
    let fs = new_fs(DataMode::InPlace).into_fs();
    let unknown = pmfs::layout::SB_VERSION + 1;
    rewrite_version(&fs, unknown);
    let image = fs.pool().pm().durable_image();
    fs.abandon();
    let pool =
        Pool::attach(SimPm::from_image(image, SimConfig::default()), pmfs::LAYOUT).expect("attach");
    assert!(matches!(
        Fs::probe(&pool),
        Err(pmfs::FsError::UnsupportedVersion { found }) if found == unknown
    ));
    assert!(matches!(
        Fs::mount(pool, options(DataMode::InPlace)),
        Err(pmfs::FsError::UnsupportedVersion { found }) if found == unknown
    ));
}

/// An unknown incompatible feature bit (valid checksum) is `UnsupportedFeatures` for the
/// probe and the mount, which write nothing; a blank superblock pair is `NotFormatted`.
#[test]
fn unknown_features_and_blank_superblocks_are_typed_refusals() {
    let fs = new_fs(DataMode::InPlace).into_fs();
    let root = fs.superblock().root_offset;
    let mut bytes = fs.superblock().encode();
    bytes[0x58..0x5C].copy_from_slice(&0x8000_0000u32.to_le_bytes());
    let crc = crc32fast::hash(&bytes[..0xFC]);
    bytes[0xFC..].copy_from_slice(&crc.to_le_bytes());
    for slot in [pmfs::layout::SB_PRIMARY, pmfs::layout::SB_COPY] {
        fs.pool()
            .pm()
            .write(root + slot, &bytes, pmem::WriteClass::Meta);
        fs.pool().pm().persist(root + slot, bytes.len() as u64);
    }
    let image = fs.pool().pm().durable_image();
    fs.abandon();
    let attach = |image: Vec<u8>| {
        Pool::attach(SimPm::from_image(image, SimConfig::default()), pmfs::LAYOUT).expect("attach")
    };
    let pool = attach(image.clone());
    assert!(matches!(
        Fs::probe(&pool),
        Err(pmfs::FsError::UnsupportedFeatures { bits: 0x8000_0000 })
    ));
    assert_eq!(pool.pm().durable_image(), image, "the probe wrote");
    assert!(matches!(
        Fs::mount(pool, options(DataMode::InPlace)),
        Err(pmfs::FsError::UnsupportedFeatures { .. })
    ));
    let mut blank = image;
    for slot in [pmfs::layout::SB_PRIMARY, pmfs::layout::SB_COPY] {
        let at = (root + slot) as usize;
        blank[at..at + 8].fill(0);
    }
    assert!(matches!(
        Fs::probe(&attach(blank)),
        Err(pmfs::FsError::NotFormatted(_))
    ));
}

/// Version 3: the words that place a file's data are checked words; a flipped bit in one is
/// a typed `Corrupted` error at mount naming the inode and the word, never a file that reads
/// its index block as data.
#[test]
fn version_three_inode_words_are_checked() {
    let px = new_fs(DataMode::InPlace);
    assert_eq!(px.fs().superblock().version, 3);
    let fd = px.creat("/data.txt", 0o644).expect("create");
    px.write(fd, &vec![b'x'; 108_894]).expect("write");
    px.close(fd).expect("close");
    let fs = px.into_fs();
    let ino = fs.lookup(1, b"data.txt").expect("file").ino;
    let at = fs.superblock().inode_offset(ino) + pmfs::inode::field::TREE;
    let word = fs.pool().pm().read_u64(at);
    assert_eq!(word & 7, 1, "a 27-leaf file has a height-1 tree");
    fs.pool()
        .pm()
        .write_u64(at, word ^ 1, pmem::WriteClass::Meta);
    fs.pool().pm().persist(at, 8);
    let image = fs.pool().pm().durable_image();
    fs.abandon();
    let pool =
        Pool::attach(SimPm::from_image(image, SimConfig::default()), pmfs::LAYOUT).expect("attach");
    let Err(pmfs::FsError::Corrupted(message)) = Fs::mount(pool, options(DataMode::InPlace)) else {
        panic!("a flipped tree word must not mount");
    };
    assert!(
        message.starts_with(&format!("inode {ino}: tree word")),
        "{message}"
    );
}

#[test]
fn huge_leaf_files() {
    let size = 24 << 20;
    let pool = Pool::format(
        SimPm::new(size, SimConfig::default()),
        &pmfs::pool_options(size),
    )
    .expect("pool");
    let opts = MountOptions {
        huge_files: true,
        ..options(DataMode::InPlace)
    };
    let px = Posix::new(Fs::mkfs(pool, &MkfsOptions::default(), opts).expect("mkfs"));
    let free = px.fs().statfs().free_blocks;
    let fd = px.open("/big", O_CREAT | O_RDWR, 0o644).expect("create");
    assert_eq!(px.fstat(fd).expect("fstat").blksize, 2 << 20);
    let data: Vec<u8> = (0..(5 << 20) + 123).map(|i: u32| (i % 253) as u8).collect();
    px.pwrite(fd, &data, 1000)
        .expect("write across three huge leaves");
    let st = px.fstat(fd).expect("fstat");
    assert_eq!(st.size, data.len() as u64 + 1000);
    assert_eq!(
        st.blocks,
        (3 * 512 + 1) * 8,
        "three 2 MiB leaves and one tree node"
    );
    let mut back = vec![0u8; data.len()];
    px.pread(fd, &mut back, 1000).expect("read");
    assert_eq!(back, data);
    px.ftruncate(fd, 3 << 20)
        .expect("shrink into the second leaf");
    assert_eq!(px.fstat(fd).expect("fstat").blocks, (2 * 512 + 1) * 8);
    px.close(fd).expect("close");
    px.fs().fsck().expect("fsck");
    let px = remount(px, DataMode::InPlace);
    let mut back = vec![0u8; 10];
    let fd = px.open("/big", O_RDONLY, 0).expect("open");
    px.pread(fd, &mut back, (3 << 20) - 10).expect("read");
    px.close(fd).expect("close");
    assert_eq!(&back[..], &data[(3 << 20) - 1010..(3 << 20) - 1000]);
    px.unlink("/big").expect("unlink");
    assert_eq!(
        px.fs().statfs().free_blocks,
        free,
        "every block, the emptied root directory's included"
    );
}

/// `open` flag combinations whose result Linux defines (checked against ext4/tmpfs on
/// Linux 6.18): `O_CREAT` on a directory, `O_CREAT | O_DIRECTORY`, `O_TRUNC` without write
/// access, a trailing slash through a symbolic link with `O_NOFOLLOW`.
#[test]
fn open_flags_match_linux() {
    use pmfs::posix::O_NOFOLLOW;
    let px = new_fs(DataMode::InPlace);
    px.mkdir("/d", 0o755).expect("mkdir");
    px.symlink("d", "/s").expect("symlink");
    let fd = px.creat("/f", 0o644).expect("creat");
    px.write(fd, b"hello").expect("write");
    px.close(fd).expect("close");
    // O_CREAT never opens a directory: EISDIR, or EEXIST with O_EXCL.
    for path in ["/d", "/d/.", "/", "/s"] {
        assert_eq!(
            px.open(path, O_CREAT | O_RDONLY, 0o644),
            Err(Errno::EISDIR),
            "{path}"
        );
        assert_eq!(
            px.open(path, O_CREAT | O_EXCL | O_RDONLY, 0o644),
            Err(Errno::EEXIST),
            "{path}"
        );
    }
    assert_eq!(
        px.open("/new", O_CREAT | O_DIRECTORY | O_RDONLY, 0o755),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        px.stat("/new").map(|_| ()),
        Err(Errno::ENOENT),
        "nothing made"
    );
    // No unnamed temporary files (O_TMPFILE carries O_DIRECTORY's bit: not EISDIR).
    assert_eq!(
        px.open("/d", libc::O_TMPFILE | O_RDWR, 0o600),
        Err(Errno::EOPNOTSUPP)
    );
    assert_eq!(px.readdir("/d").expect("readdir").len(), 2);
    // O_TRUNC asks for write access: a directory refuses it, a file is emptied.
    assert_eq!(px.open("/d", O_RDONLY | O_TRUNC, 0), Err(Errno::EISDIR));
    let fd = px.open("/f", O_RDONLY | O_TRUNC, 0).expect("open");
    assert_eq!(px.fstat(fd).expect("fstat").size, 0);
    px.close(fd).expect("close");
    // A trailing slash follows the final link even with O_NOFOLLOW.
    let fd = px.open("/s/", O_RDONLY | O_NOFOLLOW, 0).expect("s/");
    assert_eq!(px.fstat(fd).expect("fstat").kind, FileType::Directory);
    px.close(fd).expect("close");
    assert_eq!(px.open("/s", O_RDONLY | O_NOFOLLOW, 0), Err(Errno::ELOOP));
    assert_eq!(px.open_count(), 0);
    px.fs().fsck().expect("fsck");
}

/// A position past the largest file size is `EINVAL` (Linux checks its `s_maxbytes`), not a
/// position that a C `off_t` cannot hold.
#[test]
fn lseek_stops_at_the_largest_file_size() {
    let px = new_fs(DataMode::InPlace);
    let fd = px.creat("/f", 0o644).expect("creat");
    let max = pmfs::layout::MAX_FILE_SIZE;
    assert_eq!(px.lseek(fd, max as i64, Whence::Set), Ok(max));
    assert_eq!(px.lseek(fd, 1, Whence::Cur), Err(Errno::EINVAL));
    assert_eq!(px.lseek(fd, i64::MAX, Whence::Set), Err(Errno::EINVAL));
    assert_eq!(
        px.lseek(fd, 0, Whence::Cur),
        Ok(max),
        "unchanged by a refusal"
    );
    assert_eq!(px.lseek(fd, 1 << 20, Whence::Set), Ok(1 << 20));
    assert_eq!(px.lseek(fd, i64::MAX, Whence::End), Err(Errno::EINVAL));
    px.close(fd).expect("close");
}

/// Mode bits as `chmod(2)`, `mkdir(2)` and `symlink(2)` treat them: a whole `st_mode` to
/// `chmod`, set-id bits to `mkdir`, a trailing slash on a new link's name.
#[test]
fn modes_and_new_names_match_linux() {
    let px = new_fs(DataMode::InPlace);
    px.close(px.creat("/f", 0o600).expect("creat"))
        .expect("close");
    let st = px.stat("/f").expect("stat");
    px.chmod("/f", st.mode() | 0o044)
        .expect("chmod with the type bits");
    assert_eq!(px.stat("/f").expect("stat").mode(), 0o100644);
    px.mkdir("/d", 0o7777).expect("mkdir");
    assert_eq!(
        px.stat("/d").expect("stat").perm,
        0o1777,
        "set-id bits dropped"
    );
    px.chmod("/d", 0o2755).expect("chmod");
    px.mkdir("/d/sub", 0o755).expect("mkdir");
    assert_eq!(px.stat("/d/sub").expect("stat").perm, 0o2755, "inherited");
    assert_eq!(px.symlink("x", "/new/"), Err(Errno::ENOENT));
    assert_eq!(px.symlink("x", "/f/"), Err(Errno::EEXIST));
    assert_eq!(px.symlink("x", "/d/"), Err(Errno::EEXIST));
    assert_eq!(
        px.lstat("/new").map(|_| ()),
        Err(Errno::ENOENT),
        "nothing made"
    );
    px.fs().fsck().expect("fsck");
}

/// Attribute names and sizes answered as Linux's `setxattr(2)`: a bare namespace prefix is
/// `EINVAL`, a value over 64 KiB `E2BIG`; one that only overflows the block stays `ENOSPC`.
#[test]
fn extended_attribute_limits_match_linux() {
    use pmfs::SetMode;
    let px = new_fs(DataMode::InPlace);
    px.close(px.creat("/f", 0o644).expect("creat"))
        .expect("close");
    for prefix in [&b"user."[..], b"security."] {
        assert_eq!(
            px.setxattr("/f", prefix, b"v", SetMode::Any, true),
            Err(Errno::EINVAL)
        );
        assert_eq!(px.getxattr("/f", prefix, true), Err(Errno::EINVAL));
    }
    assert_eq!(
        px.setxattr("/f", b"user.big", &vec![0; 70_000], SetMode::Any, true),
        Err(Errno::E2BIG)
    );
    assert_eq!(
        px.setxattr("/f", b"user.big", &vec![0; 5_000], SetMode::Any, true),
        Err(Errno::ENOSPC)
    );
    assert_eq!(px.listxattr("/f", true), Ok(vec![]));
    assert_eq!(Errno::E2BIG.raw(), libc::E2BIG);
    assert_eq!(Errno::E2BIG.name(), "E2BIG");
}

/// A pool of another layout (an engine's pool) is refused by mkfs, mount, probe and repair
/// with the pool error `Pool::open` gives for it (`WrongLayout`, the CLI's exit 12), not as
/// a bad argument.
#[test]
fn a_pool_of_another_layout_is_wrong_layout() {
    const OTHER: u64 = 1 << 20;
    let fresh = || {
        let mut options = pmem::CreateOptions::new("redo", OTHER);
        options.root_size = pmfs::layout::ROOT_SIZE;
        Pool::format(SimPm::new(OTHER, SimConfig::default()), &options).expect("pool")
    };
    let wrong = |error: pmfs::FsError| match error {
        pmfs::FsError::Pool(pmem::PoolError::WrongLayout { expected, found }) => {
            assert_eq!((expected.as_str(), found.as_str()), (pmfs::LAYOUT, "redo"));
        }
        other => panic!("not WrongLayout: {other:?}"),
    };
    let pool = fresh();
    wrong(Fs::probe(&pool).expect_err("probe"));
    wrong(Fs::mount(pool, options(DataMode::InPlace)).expect_err("mount"));
    let pool = fresh();
    wrong(
        Fs::repair(pool, options(DataMode::InPlace))
            .map(|_| ())
            .expect_err("repair"),
    );
    let pool = fresh();
    wrong(
        Fs::mkfs(pool, &MkfsOptions::default(), options(DataMode::InPlace))
            .map(|_| ())
            .expect_err("mkfs"),
    );
}

/// A path-based call that the file system runs under its own lock (the extended-attribute
/// calls; `fallocate` and `mmap` on a descriptor likewise) holds the inode it looked up:
/// an unlink by another thread in between cannot free it and hand its number to a new file,
/// which the call would then change instead. Before, a `setxattr("/a")` racing with
/// `unlink("/a")` + `creat("/b")` set the attribute on `/b` a few times a second.
#[test]
fn a_path_call_never_lands_on_a_file_created_after_its_lookup() {
    use pmfs::SetMode;
    use std::sync::atomic::{AtomicBool, Ordering};
    const SIZE: u64 = 16 << 20;
    let pool = Pool::format(
        pmem::MemPm::new(vec![0; SIZE as usize]),
        &pmfs::pool_options(SIZE),
    )
    .expect("pool");
    let fs = Fs::mkfs(pool, &MkfsOptions::default(), options(DataMode::InPlace)).expect("mkfs");
    let px = Posix::new(fs);
    px.close(px.creat("/a", 0o644).expect("creat"))
        .expect("close");
    let stop = AtomicBool::new(false);
    let misplaced = std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let _ = px.setxattr("/a", b"user.x", b"1", SetMode::Any, true);
            }
        });
        let start = std::time::Instant::now();
        let mut misplaced = 0;
        while start.elapsed() < std::time::Duration::from_secs(3) && misplaced == 0 {
            let _ = px.unlink("/a");
            px.close(px.creat("/b", 0o644).expect("creat b"))
                .expect("close");
            if px.getxattr("/b", b"user.x", true).is_ok() {
                misplaced += 1;
            }
            px.unlink("/b").expect("unlink b");
            px.close(px.creat("/a", 0o644).expect("creat a"))
                .expect("close");
        }
        stop.store(true, Ordering::Relaxed);
        misplaced
    });
    assert_eq!(misplaced, 0, "an attribute set on /a appeared on /b");
    assert_eq!(px.open_count(), 0);
    px.fs().fsck().expect("fsck");
}

/// `fsetattr` is `ftruncate` when it carries a size: a read-only descriptor cannot change
/// the size (it did: the file was emptied through `O_RDONLY`); and `fchmod` of a whole
/// `st_mode` keeps the permission bits, as `chmod`.
#[test]
fn fsetattr_with_a_size_needs_a_writable_descriptor() {
    use pmfs::SetAttr;
    let px = new_fs(DataMode::InPlace);
    let fd = px.creat("/f", 0o644).expect("creat");
    px.write(fd, b"keep me").expect("write");
    px.close(fd).expect("close");
    let ro = px.open("/f", O_RDONLY, 0).expect("open");
    let shrink = SetAttr {
        size: Some(0),
        ..SetAttr::default()
    };
    assert_eq!(px.fsetattr(ro, shrink).map(|a| a.size), Err(Errno::EINVAL));
    assert_eq!(px.ftruncate(ro, 0), Err(Errno::EINVAL));
    assert_eq!(read_all(&px, "/f"), b"keep me");
    let chmod = SetAttr {
        perm: Some(0o100600),
        ..SetAttr::default()
    };
    assert_eq!(px.fsetattr(ro, chmod).map(|a| a.perm), Ok(0o600));
    px.close(ro).expect("close");
    let rw = px.open("/f", O_RDWR, 0).expect("open");
    assert_eq!(px.fsetattr(rw, shrink).map(|a| a.size), Ok(0));
    px.close(rw).expect("close");
}

/// Paths are bytes, as on Linux: a name that is not UTF-8 is made, found, linked, renamed and
/// listed through every path type the calls take (`&str`, bytes, `OsStr`, `Path`).
#[test]
fn names_that_are_not_utf8_work_through_every_path_type() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;
    let px = new_fs(DataMode::InPlace);
    px.mkdir(b"/d\xff", 0o755).expect("mkdir");
    let fd = px
        .open(
            OsStr::from_bytes(b"/d\xff/caf\xe9"),
            O_CREAT | O_WRONLY,
            0o644,
        )
        .expect("create");
    px.write(fd, b"bytes").expect("write");
    px.close(fd).expect("close");
    px.symlink(b"caf\xe9", Path::new(OsStr::from_bytes(b"/d\xff/l\xfd")))
        .expect("symlink");
    assert_eq!(
        px.readlink(&b"/d\xff/l\xfd".to_vec()).expect("readlink"),
        b"caf\xe9"
    );
    px.rename(b"/d\xff/caf\xe9", "/d\u{ff}/plain")
        .expect_err("a UTF-8 name is another name");
    px.rename(b"/d\xff/caf\xe9", b"/d\xff/g\xfc")
        .expect("rename");
    assert_eq!(
        px.stat(b"/d\xff/l\xfd"),
        Err(Errno::ENOENT),
        "the link dangles"
    );
    let px = remount(px, DataMode::InPlace);
    assert_eq!(px.stat(b"/d\xff/g\xfc").expect("renamed").size, 5);
    let mut names: Vec<Vec<u8>> = px
        .readdir(b"/d\xff")
        .expect("readdir")
        .into_iter()
        .map(|e| e.name)
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            b".".to_vec(),
            b"..".to_vec(),
            b"g\xfc".to_vec(),
            b"l\xfd".to_vec()
        ]
    );
    px.into_fs().fsck().expect("fsck");
}
