//! The kernel-facing API (`pmfs::kernel`): pinned numbers are not reused before `forget`,
//! nodes get the caller's credentials (and a set-group-ID parent's group), special files
//! (FIFOs, sockets, devices) carry no data and survive a remount.

use crashsim::{SimConfig, SimPm};
use pmem::Pool;
use pmfs::{Caller, Clock, Errno, FileType, Fs, MkfsOptions, MountOptions};

fn fresh() -> Fs<SimPm> {
    let size = 2 << 20;
    let pool = Pool::format(
        SimPm::new(size, SimConfig::default()),
        &pmfs::pool_options(size),
    )
    .expect("pool");
    let options = MountOptions {
        clock: Clock::Fixed(3),
        ..MountOptions::default()
    };
    let mkfs = MkfsOptions {
        inodes: Some(8),
        journal_entries: 64,
        ..MkfsOptions::default()
    };
    Fs::mkfs(pool, &mkfs, options).expect("mkfs")
}

const ME: Caller = Caller {
    uid: 1000,
    gid: 100,
};

#[test]
fn a_pinned_number_is_reused_only_after_forget() {
    let fs = fresh();
    let a = fs
        .make_pinned(1, b"a", FileType::Regular, 0o644, None, 0, ME)
        .expect("create");
    assert_eq!((a.uid, a.gid), (1000, 100));
    assert_eq!(fs.pins(a.ino), 1);
    fs.lookup_pinned(1, b"a").expect("lookup");
    assert_eq!(fs.pins(a.ino), 2);
    fs.unlink(1, b"a").expect("unlink");
    // Fill every free number: the pinned one is not among them.
    let mut made = Vec::new();
    while let Ok(attr) = fs.create(1, format!("f{}", made.len()).as_bytes(), 0o600) {
        made.push(attr.ino);
    }
    assert!(!made.contains(&a.ino), "reused {} while pinned", a.ino);
    fs.fsck().expect("fsck with a pinned free number");
    fs.forget(a.ino, 1);
    assert_eq!(fs.create(1, b"x", 0o600).err(), Some(Errno::ENOSPC));
    fs.forget(a.ino, 1);
    assert_eq!(fs.create(1, b"x", 0o600).expect("reuse").ino, a.ino);
    fs.fsck().expect("fsck");
}

#[test]
fn special_files_and_set_group_id_directories() {
    let fs = fresh();
    let dir = fs
        .make_pinned(
            1,
            b"shared",
            FileType::Directory,
            0o2775,
            None,
            0,
            Caller { uid: 0, gid: 50 },
        )
        .expect("mkdir");
    let fifo = fs
        .make_pinned(dir.ino, b"fifo", FileType::Fifo, 0o600, None, 0, ME)
        .expect("mkfifo");
    assert_eq!(fifo.gid, 50, "group of the set-group-ID directory");
    let sub = fs
        .make_pinned(dir.ino, b"sub", FileType::Directory, 0o755, None, 0, ME)
        .expect("mkdir");
    assert_eq!(sub.perm & 0o2000, 0o2000, "subdirectories inherit the bit");
    let dev = fs
        .make_pinned(
            dir.ino,
            b"null",
            FileType::CharDevice,
            0o666,
            None,
            0x0103,
            ME,
        )
        .expect("mknod");
    assert_eq!(dev.rdev, 0x0103);
    assert_eq!(
        fs.make_pinned(dir.ino, b"bad", FileType::Fifo, 0o600, None, 7, ME)
            .err(),
        Some(Errno::EINVAL),
        "a device number on a FIFO"
    );
    assert_eq!(
        fs.read(fifo.ino, 0, &mut [0u8; 4]).err(),
        Some(Errno::EINVAL)
    );
    assert_eq!(fs.write(dev.ino, 0, b"x").err(), Some(Errno::EINVAL));
    let report = fs.fsck().expect("fsck");
    assert_eq!(report.specials, 2);
    let image = fs.pool().pm().durable_image();
    let pool =
        Pool::attach(SimPm::from_image(image, SimConfig::default()), pmfs::LAYOUT).expect("attach");
    let fs = Fs::mount(pool, MountOptions::default()).expect("remount");
    let again = fs.lookup(dir.ino, b"null").expect("lookup");
    assert_eq!((again.kind, again.rdev), (FileType::CharDevice, 0x0103));
    fs.fsck().expect("fsck");
}

/// A node's kind and its target must agree: a symbolic link made without a target was a
/// link of size 0 (`readlink` then answered `EIO` and fsck reported damage), and a regular
/// file made with one got the target as its data. Both are `EINVAL`, and nothing is made.
#[test]
fn a_target_is_for_symbolic_links_only() {
    let fs = fresh();
    let made = |name: &[u8], kind, target| {
        fs.make_pinned(1, name, kind, 0o644, target, 0, ME)
            .map(|a| a.ino)
    };
    assert_eq!(made(b"l", FileType::Symlink, None), Err(Errno::EINVAL));
    for kind in [
        FileType::Regular,
        FileType::Directory,
        FileType::Fifo,
        FileType::Socket,
    ] {
        assert_eq!(
            made(b"x", kind, Some(&b"t"[..])),
            Err(Errno::EINVAL),
            "{kind:?}"
        );
    }
    assert_eq!(fs.readdir(1).expect("readdir").len(), 2, "nothing made");
    let ino = made(b"l", FileType::Symlink, Some(&b"t"[..])).expect("symlink");
    assert_eq!(fs.readlink(ino), Ok(b"t".to_vec()));
    fs.fsck().expect("fsck");
}
