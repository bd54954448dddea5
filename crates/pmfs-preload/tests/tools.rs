//! Ordinary tools on served paths through the preload library: links, attribute changes,
//! file system statistics and directory walks (`ln`, `chmod`, `df`, `find`, `rm -r`, `mv`,
//! `cp -p`), each result read back through the library from the pool, which fsck checks.

mod common;

use common::{PREFIX, TestPool, read_file, serial};
use pmfs::{Errno, FileType};

#[test]
fn ln_and_ln_s_make_links_and_a_link_out_of_the_prefix_is_cross_device() {
    let _serial = serial();
    let pool = TestPool::new("ln", 16 << 20);
    let out = pool.sh(
        "cp /etc/hostname $P/f && ln $P/f $P/h && ln -s f $P/s && readlink $P/s && cat $P/s \
         && stat -c %h $P/f && ln -s /nowhere/else $P/abs && readlink $P/abs \
         && python3 -c 'import os; os.link(\"'$P'/f\", \"'$P'/py\"); os.symlink(\"h\", \"'$P'/pys\")' \
         ; ln $P/f /tmp/ferrite-preload-out-$$ 2>&1; echo ln-out=$?",
    );
    let hostname = std::fs::read_to_string("/etc/hostname").expect("hostname");
    assert!(
        out.starts_with(&format!("f\n{hostname}2\n/nowhere/else\n")),
        "{out}"
    );
    assert!(
        out.contains("Invalid cross-device link") && out.ends_with("ln-out=1\n"),
        "{out}"
    );
    let px = pool.mount_and_check();
    let f = px.stat("/f").expect("f");
    assert_eq!(f.nlink, 3);
    assert_eq!(px.stat("/h").expect("h").ino, f.ino);
    assert_eq!(px.stat("/py").expect("python's link").ino, f.ino);
    assert_eq!(px.lstat("/s").expect("s").kind, FileType::Symlink);
    assert_eq!(px.readlink("/s").expect("readlink"), b"f");
    assert_eq!(px.readlink("/pys").expect("python's symlink"), b"h");
    assert_eq!(px.readlink("/abs").expect("readlink"), b"/nowhere/else");
    assert_eq!(
        read_file(&px, "/s").expect("through s"),
        hostname.as_bytes()
    );
    px.into_fs().unmount().expect("unmount");
}

/// Linux names are bytes: a name that is not UTF-8 under the prefix is served like any other
/// (it used to fall through to the kernel, which made the file outside the pool, or in `/`
/// for a name relative to a served directory descriptor).
#[test]
fn names_that_are_not_utf8_are_served_never_left_to_the_kernel() {
    let _serial = serial();
    let pool = TestPool::new("bytes", 16 << 20);
    let out = pool.sh(
        "e=$(printf 'caf\\351'); d=$(printf 'd\\377'); f=$(printf 'f\\376'); \
         g=$(printf 'g\\374'); l=$(printf 'l\\375') \
         && echo one > \"$P/$e\" && mkdir \"$P/$d\" && echo two > \"$P/$d/$f\" \
         && cd \"$P/$d\" && [ \"$(pwd -P)\" = \"$P/$d\" ] && echo pwd-ok \
         && ln -s \"$f\" \"$l\" && cat \"$l\" && mv \"$f\" \"$g\" \
         && [ \"$(realpath \"$g\")\" = \"$P/$d/$g\" ] && echo realpath-ok \
         && ls \"$P/$d\" | wc -l",
    );
    assert_eq!(out, "pwd-ok\ntwo\nrealpath-ok\n2\n");
    assert!(
        !std::path::Path::new(PREFIX).exists(),
        "nothing was made in the kernel's {PREFIX}"
    );
    let px = pool.mount_and_check();
    assert_eq!(read_file(&px, b"/caf\xe9").expect("caf\\xe9"), b"one\n");
    assert_eq!(read_file(&px, b"/d\xff/g\xfc").expect("g\\xfc"), b"two\n");
    assert_eq!(px.readlink(b"/d\xff/l\xfd").expect("link"), b"f\xfe");
    assert_eq!(px.stat(b"/d\xff/f\xfe"), Err(Errno::ENOENT));
    px.into_fs().unmount().expect("unmount");
}

#[test]
fn chmod_chown_and_touch_change_served_attributes() {
    let _serial = serial();
    let pool = TestPool::new("chmod", 16 << 20);
    let out = pool.sh(
        "cp /etc/hostname $P/f && chmod 640 $P/f && stat -c %a $P/f && chmod u+x,o+r $P/f \
         && stat -c %a $P/f && chown 1234:5678 $P/f && touch -d '2021-05-06 07:08:09' $P/f \
         && ln -s f $P/s && touch -h -d '2020-01-02 03:04:05' $P/s && chmod 600 $P/s \
         && stat -c %a $P/f",
    );
    assert_eq!(out, "640\n744\n600\n");
    let px = pool.mount_and_check();
    let f = px.stat("/f").expect("f");
    assert_eq!((f.mode() & 0o7777, f.uid, f.gid), (0o600, 1234, 5678));
    assert_eq!(f.mtime, 1_620_284_889 * 1_000_000_000);
    let s = px.lstat("/s").expect("s");
    assert_eq!(
        s.mtime,
        1_577_934_245 * 1_000_000_000,
        "touch -h changed the link"
    );
    px.into_fs().unmount().expect("unmount");
}

#[test]
fn df_and_statvfs_report_the_pools_own_counts() {
    let _serial = serial();
    let pool = TestPool::new("df", 32 << 20);
    let stat_f = pool.sh(
        "cp /bin/sh $P/big && stat -f -c '%b %f %a %c %d %l %S' $P/big \
         && python3 -c 'import os; s = os.statvfs(\"'$P'\"); print(s.f_blocks, s.f_bfree)'",
    );
    let df = pool.sh("df -B4096 --output=size,avail,target $P/big");
    let px = pool.mount_and_check();
    let counts = px.fs().statfs();
    assert!(counts.free_blocks < counts.blocks, "the copy used blocks");
    let df_row = df.lines().nth(1).expect("df's row");
    let want = format!("{} {} {PREFIX}", counts.blocks, counts.free_blocks);
    assert_eq!(
        df_row.split_whitespace().collect::<Vec<_>>().join(" "),
        want
    );
    let want = [
        counts.blocks,
        counts.free_blocks,
        counts.free_blocks,
        counts.inodes,
        counts.free_inodes,
        255,
        4096,
    ]
    .map(|n| n.to_string())
    .join(" ");
    let want = format!("{want}\n{} {}\n", counts.blocks, counts.free_blocks);
    assert_eq!(stat_f, want, "stat -f, then os.statvfs");
    px.into_fs().unmount().expect("unmount");
}

#[test]
fn find_du_and_rm_r_walk_a_served_tree() {
    let _serial = serial();
    let pool = TestPool::new("walk", 16 << 20);
    let out = pool.sh("mkdir -p $P/t/a/b $P/t/c && cp /etc/hostname $P/t/a/b/f \
         && cp /etc/hostname $P/t/g && ln -s g $P/t/s && find $P/t | sort \
         && find $P -name f -type f && du -s $P/t > /dev/null && ls -R $P/t > /dev/null \
         && rm -r $P/t/a && find $P/t | sort");
    let expected_before = ["", "/a", "/a/b", "/a/b/f", "/c", "/g", "/s"];
    let expected_after = ["", "/c", "/g", "/s"];
    let mut want = String::new();
    for tail in expected_before {
        want.push_str(&format!("{PREFIX}/t{tail}\n"));
    }
    want.push_str(&format!("{PREFIX}/t/a/b/f\n"));
    for tail in expected_after {
        want.push_str(&format!("{PREFIX}/t{tail}\n"));
    }
    assert_eq!(out, want);
    pool.sh("rm -rf $P/t && env test ! -e $P/t");
    let px = pool.mount_and_check();
    assert_eq!(px.stat("/t").map(|_| ()), Err(Errno::ENOENT));
    let names: Vec<Vec<u8>> = px
        .readdir("/")
        .expect("root")
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(
        names,
        [b".".to_vec(), b"..".to_vec()],
        "rm -rf left entries"
    );
    px.into_fs().unmount().expect("unmount");
}

#[test]
fn mv_out_keeps_the_mode_and_cp_p_in_keeps_mode_times_and_attributes() {
    let _serial = serial();
    let pool = TestPool::new("mv", 16 << 20);
    let outside = std::env::temp_dir().join(format!("ferrite-preload-mv-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&outside);
    std::fs::create_dir_all(&outside).expect("dir");
    let o = outside.display();
    let out = pool.sh(&format!(
        "cp /etc/hostname $P/m && chmod 751 $P/m && mv $P/m {o}/m && stat -c %a {o}/m \
         && env test ! -e $P/m && cp /etc/hostname {o}/in && chmod 604 {o}/in \
         && touch -d '2021-05-06 07:08:09' {o}/in && cp -p {o}/in $P/in \
         && cp -a {o}/m $P/back && stat -c %a $P/back"
    ));
    assert_eq!(out, "751\n751\n");
    let px = pool.mount_and_check();
    let copied = px.stat("/in").expect("in");
    assert_eq!(copied.mode() & 0o7777, 0o604);
    assert_eq!(copied.mtime, 1_620_284_889 * 1_000_000_000);
    assert_eq!(px.stat("/m").map(|_| ()), Err(Errno::ENOENT));
    px.into_fs().unmount().expect("unmount");
    std::fs::remove_dir_all(&outside).expect("cleanup");
}

#[test]
fn a_working_directory_inside_the_prefix_serves_relative_paths() {
    let _serial = serial();
    let pool = TestPool::new("cwd", 16 << 20);
    let out = pool.sh("mkdir $P/d && python3 -c '
import os
os.chdir(\"'$P'/d\")
print(os.getcwd())
os.mkdir(\"sub\")
with open(\"sub/file\", \"w\") as f:
    f.write(\"relative\")
os.chdir(\"sub\")
print(os.getcwd(), sorted(os.listdir(\"..\")), open(\"file\").read())
os.chdir(\"/\")
print(os.getcwd())
'");
    assert_eq!(
        out,
        format!("{PREFIX}/d\n{PREFIX}/d/sub ['sub'] relative\n/\n")
    );
    let px = pool.mount_and_check();
    assert_eq!(read_file(&px, "/d/sub/file").expect("file"), b"relative");
    px.into_fs().unmount().expect("unmount");
}

/// `vectored DIR`: `writev`/`readv`/`pwritev`/`preadv` on a served file, then `realpath`
/// and `canonicalize_file_name` of served paths.
const VECTORED_PROGRAM: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>
static void die(const char *what) { perror(what); exit(2); }
int main(int argc, char **argv) {
    char path[512], a[4] = {0}, b[8] = {0}, resolved[PATH_MAX];
    snprintf(path, sizeof path, "%s/dir/v", argv[1]);
    int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (fd < 0) die("open");
    struct iovec out[2] = {{"abc", 3}, {"defghij", 7}};
    printf("writev %zd\n", writev(fd, out, 2));
    struct iovec at[1] = {{"XY", 2}};
    printf("pwritev %zd\n", pwritev(fd, at, 1, 4));
    lseek(fd, 0, SEEK_SET);
    struct iovec in[2] = {{a, 3}, {b, 7}};
    printf("readv %zd %s %s\n", readv(fd, in, 2), a, b);
    memset(b, 0, sizeof b);
    struct iovec tail[1] = {{b, 7}};
    printf("preadv %zd %s\n", preadv(fd, tail, 1, 5), b);
    close(fd);
    snprintf(path, sizeof path, "%s/dir/./sub/../link", argv[1]);
    printf("realpath %s\n", realpath(path, resolved) ? resolved : strerror(errno));
    char *fresh = canonicalize_file_name(path);
    printf("canonicalize %s\n", fresh ? fresh : strerror(errno));
    free(fresh);
    snprintf(path, sizeof path, "%s/dir/missing", argv[1]);
    printf("missing %s\n", realpath(path, resolved) ? resolved : strerror(errno));
    return 0;
}
"#;

#[test]
fn vectored_io_and_realpath_are_served() {
    let _serial = serial();
    let Some(program) = common::compile("vectored", VECTORED_PROGRAM) else {
        eprintln!("SKIPPED: gcc is not installed");
        return;
    };
    let pool = TestPool::new("vectored", 16 << 20);
    pool.sh("mkdir -p $P/dir/sub && ln -s v $P/dir/link");
    let out = common::run(pool.command(program.to_str().unwrap()).arg(PREFIX));
    assert_eq!(
        out,
        format!(
            "writev 10\npwritev 2\nreadv 10 abc dXYghij\npreadv 5 Yghij\n\
             realpath {PREFIX}/dir/v\ncanonicalize {PREFIX}/dir/v\n\
             missing No such file or directory\n"
        )
    );
    let px = pool.mount_and_check();
    assert_eq!(read_file(&px, "/dir/v").expect("v"), b"abcdXYghij");
    px.into_fs().unmount().expect("unmount");
}

/// A damaged pool is refused with what the library found and what to do about it: the
/// line named the damage only ("file system corrupted: inode 7: mode|nlink word … fails
/// its check"), leaving the user to find `ferrite fs fsck --repair`.
#[test]
fn a_damaged_pool_is_refused_naming_fsck_and_its_repair() {
    let _serial = serial();
    let pool = TestPool::new("damaged", 16 << 20);
    let px = pool.mount_and_check();
    // The top byte of an unused inode's mode|nlink word, a checked word (format §3).
    let at = px.fs().superblock().inode_offset(7) + 0x20 + 7;
    px.into_fs().unmount().expect("unmount");
    let mut image = std::fs::read(&pool.0).expect("read pool");
    image[at as usize] ^= 0x10;
    std::fs::write(&pool.0, &image).expect("write pool");
    let out = pool.command("ls").arg(PREFIX).output().expect("ls");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let name = pool.0.display();
    assert!(stderr.contains("inode 7"), "{stderr}");
    assert!(
        stderr.contains(&format!("`ferrite fs fsck --repair {name}`")),
        "{stderr}"
    );
}
