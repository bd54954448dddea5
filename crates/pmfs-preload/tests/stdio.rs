//! C stdio on served files through the preload library: a C program using `fopen`,
//! `fprintf`, `fgets`, `fseek`, `fdopen`, `freopen` and `mkstemp`, and the tools built on
//! them (`sed -i`, `sort -o`, `awk` printing into a file, a shell built-in's output
//! redirected), each result read back through the library from the pool, which fsck checks.

mod common;

use common::{PREFIX, TestPool, compile, have, read_file, run, serial};

/// `stdio DIR` exercises stdio on files in `DIR`; prints one line per check.
const STDIO_PROGRAM: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
static void die(const char *what) { perror(what); exit(2); }
int main(int argc, char **argv) {
    char path[512], line[256];
    const char *dir = argv[1];
    snprintf(path, sizeof path, "%s/text", dir);
    FILE *f = fopen(path, "w");
    if (!f) die("fopen w");
    for (int i = 0; i < 1000; i++) fprintf(f, "line %04d\n", i);
    if (fflush(f) != 0) die("fflush");
    struct stat st;
    if (fstat(fileno(f), &st) != 0) die("fstat of fileno");
    printf("size after fflush %lld\n", (long long)st.st_size);
    if (fclose(f) != 0) die("fclose");

    f = fopen(path, "r+");
    if (!f) die("fopen r+");
    if (fseeko(f, 10 * 500, SEEK_SET) != 0) die("fseeko");
    if (!fgets(line, sizeof line, f)) die("fgets");
    printf("at 5000: %s", line);
    printf("ftello %lld\n", (long long)ftello(f));
    if (fseek(f, -10, SEEK_END) != 0) die("fseek end");
    if (fputs("LAST LINE\n", f) < 0) die("fputs");
    rewind(f);
    if (!fgets(line, sizeof line, f)) die("fgets after rewind");
    printf("first: %s", line);
    if (fclose(f) != 0) die("fclose r+");

    f = fopen(path, "a");
    if (!f || fprintf(f, "appended\n") < 0 || fclose(f) != 0) die("append");

    printf("x on existing: %s\n", fopen(path, "wx") == NULL && errno == EEXIST ? "EEXIST" : "?");
    snprintf(line, sizeof line, "%s/missing", dir);
    printf("r of missing: %s\n", fopen(line, "r") == NULL && errno == ENOENT ? "ENOENT" : "?");
    printf("bad mode: %s\n", fopen(path, "z") == NULL && errno == EINVAL ? "EINVAL" : "?");

    snprintf(line, sizeof line, "%s/viafd", dir);
    int fd = open(line, O_CREAT | O_RDWR | O_TRUNC, 0640);
    if (fd < 0) die("open");
    f = fdopen(fd, "w+");
    if (!f) die("fdopen");
    fprintf(f, "through fdopen %d\n", 42);
    fflush(f);
    if (fsync(fileno(f)) != 0) die("fsync");
    fclose(f);
    printf("closed by fclose: %s\n", close(fd) != 0 && errno == EBADF ? "EBADF" : "?");

    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s/tmpXXXXXX", dir);
    int t = mkstemp(tmp);
    if (t < 0) die("mkstemp");
    if (write(t, "temp\n", 5) != 5) die("write temp");
    close(t);
    snprintf(line, sizeof line, "%s/renamed", dir);
    if (rename(tmp, line) != 0) die("rename temp");
    printf("mkstemp under %s: %s\n", dir, strncmp(tmp, dir, strlen(dir)) == 0 ? "yes" : "no");

    snprintf(line, sizeof line, "%s/stdout", dir);
    fflush(stdout);
    int saved = dup(1);
    if (!freopen(line, "w", stdout)) die("freopen");
    printf("into the served file through stdout\n");
    fflush(stdout);
    dup2(saved, 1);
    printf("back on the terminal\n");
    return 0;
}
"#;

#[test]
fn a_c_program_uses_stdio_on_served_files() {
    let _serial = serial();
    let Some(program) = compile("stdio", STDIO_PROGRAM) else {
        eprintln!("SKIPPED: gcc is not installed");
        return;
    };
    let pool = TestPool::new("stdio", 16 << 20);
    let out = run(pool.command(program.to_str().unwrap()).arg(PREFIX));
    assert_eq!(
        out,
        format!(
            "size after fflush 10000\nat 5000: line 0500\nftello 5010\nfirst: line 0000\n\
             x on existing: EEXIST\nr of missing: ENOENT\nbad mode: EINVAL\n\
             closed by fclose: EBADF\nmkstemp under {PREFIX}: yes\nback on the terminal\n"
        )
    );
    let px = pool.mount_and_check();
    let text = read_file(&px, "/text").expect("text");
    let mut want: String = (0..999).map(|i| format!("line {i:04}\n")).collect();
    want.push_str("LAST LINE\nappended\n");
    assert_eq!(String::from_utf8(text).expect("utf-8"), want);
    assert_eq!(
        read_file(&px, "/viafd").expect("viafd"),
        b"through fdopen 42\n"
    );
    assert_eq!(px.stat("/viafd").expect("viafd").mode() & 0o777, 0o640);
    assert_eq!(read_file(&px, "/renamed").expect("temp"), b"temp\n");
    assert_eq!(
        read_file(&px, "/stdout").expect("stdout"),
        b"into the served file through stdout\n"
    );
    px.into_fs().unmount().expect("unmount");
}

#[test]
fn sed_i_sort_o_awk_and_a_builtins_redirection_write_served_files() {
    let _serial = serial();
    let pool = TestPool::new("tools-stdio", 16 << 20);
    let script = "printf 'pear\\napple\\nfig\\n' | tee $P/fruit > /dev/null \
         && chmod 640 $P/fruit && sed -i 's/apple/APPLE/' $P/fruit && sort -o $P/sorted $P/fruit \
         && sort -o $P/fruit $P/fruit \
         && awk '{ print NR \": \" $0 > \"'$P'/numbered\" }' $P/sorted";
    pool.sh(script);
    if have("bash") {
        run(pool.command("bash").env("P", PREFIX).args([
            "-c",
            "echo from bash > $P/bash; printf '%s\\n' more >> $P/bash",
        ]));
    }
    run(pool
        .command("sh")
        .env("P", PREFIX)
        .args(["-c", "echo from sh > $P/sh; printf '%s\\n' more >> $P/sh"]));
    let px = pool.mount_and_check();
    assert_eq!(
        read_file(&px, "/sorted").expect("sorted"),
        b"APPLE\nfig\npear\n"
    );
    assert_eq!(
        read_file(&px, "/fruit").expect("fruit"),
        b"APPLE\nfig\npear\n"
    );
    assert_eq!(
        px.stat("/fruit").expect("fruit").mode() & 0o777,
        0o640,
        "sed -i kept the mode"
    );
    assert_eq!(
        read_file(&px, "/numbered").expect("numbered"),
        b"1: APPLE\n2: fig\n3: pear\n"
    );
    let names: Vec<String> = px
        .readdir("/")
        .expect("root")
        .into_iter()
        .map(|e| String::from_utf8_lossy(&e.name).into_owned())
        .collect();
    assert!(
        !names.iter().any(|n| n.starts_with("sed")),
        "sed's temporary file is left: {names:?}"
    );
    if have("bash") {
        assert_eq!(read_file(&px, "/bash").expect("bash"), b"from bash\nmore\n");
    }
    assert_eq!(read_file(&px, "/sh").expect("sh"), b"from sh\nmore\n");
    px.into_fs().unmount().expect("unmount");
}

#[test]
fn a_redirection_bash_makes_for_a_command_hands_it_the_served_file() {
    let _serial = serial();
    if !have("bash") {
        eprintln!("SKIPPED: bash is not installed");
        return;
    }
    let pool = TestPool::new("redirect", 16 << 20);
    // Each external command gets its redirections in the child bash forks for it; the
    // built-in's is applied in bash itself, which gives the pool up again before it
    // starts another command.
    let script = "ls / > $P/ls && cat /etc/hostname >> $P/ls && wc -l < $P/ls > $P/count \
                  && echo built-in >> $P/count";
    run(pool.command("bash").env("P", PREFIX).args(["-c", script]));
    // dash opens a command's redirection in the shell itself, which then holds the file
    // and the pool: the command gets the placeholder descriptor and fails, typed, without
    // harm.
    let dash = pool
        .command("sh")
        .env("P", PREFIX)
        .args(["-c", "ls / > $P/from-dash"])
        .output()
        .expect("sh");
    let px = pool.mount_and_check();
    let listing = std::fs::read_dir("/")
        .expect("/")
        .filter(|e| {
            let name = e.as_ref().expect("entry").file_name();
            !name.to_string_lossy().starts_with('.')
        })
        .count();
    let hostname = std::fs::read("/etc/hostname").expect("hostname");
    let ls = read_file(&px, "/ls").expect("ls");
    assert_eq!(ls.iter().filter(|&&b| b == b'\n').count(), listing + 1);
    assert!(ls.ends_with(&hostname));
    let count = read_file(&px, "/count").expect("count");
    assert_eq!(count, format!("{}\nbuilt-in\n", listing + 1).as_bytes());
    assert!(!dash.status.success());
    assert!(
        String::from_utf8_lossy(&dash.stderr).contains("Bad file descriptor"),
        "{}",
        String::from_utf8_lossy(&dash.stderr)
    );
    assert_eq!(read_file(&px, "/from-dash").expect("created, empty"), b"");
    px.into_fs().unmount().expect("unmount");
}

#[test]
fn a_process_that_holds_nothing_served_leaves_the_pool_to_the_programs_it_starts() {
    let _serial = serial();
    let pool = TestPool::new("release", 16 << 20);
    // A built-in's redirection opens the file in the shell itself; once the file is closed
    // the shell holds nothing served and gives the pool up before starting `cat` (dash
    // starts it with vfork, bash with fork), then mounts it again for the next built-in.
    let script = "echo one > $P/f-$0; cat $P/f-$0; echo two >> $P/f-$0; \
                  cat $P/f-$0 | tr a-z A-Z; cat $P/f-$0 > /dev/null && echo three >> $P/f-$0";
    let mut shells = vec!["sh"];
    if have("bash") {
        shells.push("bash");
    }
    for shell in &shells {
        let out = run(pool
            .command(shell)
            .env("P", PREFIX)
            .args(["-c", script, shell]));
        assert_eq!(out, "one\nONE\nTWO\n", "{shell}");
    }
    // Python starts programs with vfork (subprocess), system and popen.
    if have("python3") {
        let python = "import os, subprocess\n\
                      P = os.environ['P']\n\
                      open(P + '/py', 'w').write('from python\\n')\n\
                      print(subprocess.run(['cat', P + '/py'], capture_output=True, text=True).stdout, end='')\n\
                      os.system('cp $P/py $P/py2')\n\
                      print(os.popen('wc -c $P/py').read(), end='')\n\
                      held = open(P + '/held', 'w')\n\
                      busy = subprocess.run(['cat', P + '/py'], capture_output=True, text=True)\n\
                      print(busy.returncode != 0 and 'busy' in busy.stderr)\n";
        let out = run(pool
            .command("python3")
            .env("P", PREFIX)
            .args(["-c", python]));
        assert_eq!(out, format!("from python\n12 {PREFIX}/py\nTrue\n"));
    }
    let px = pool.mount_and_check();
    for shell in &shells {
        assert_eq!(
            read_file(&px, &format!("/f-{shell}")).expect("written"),
            b"one\ntwo\nthree\n"
        );
    }
    if have("python3") {
        assert_eq!(read_file(&px, "/py2").expect("py2"), b"from python\n");
    }
    px.into_fs().unmount().expect("unmount");
}

/// `shell-calls`: the C library's `system` from the working directory (`test -f b` and
/// `exit 3`), and `popen`, whose shell the C library starts where no preload sees (it finds
/// nothing), one line of results.
const SHELL_CALLS: &str = r#"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
int main(void) {
    int found = system("test -f b");
    int three = system("exit 3");
    FILE *in = popen("test -f b", "r");
    int piped = in ? pclose(in) : -1;
    char line[64] = "";
    FILE *cat = popen("cat b", "r");
    if (!cat || !fgets(line, sizeof line, cat))
        line[0] = 0;
    int catted = cat ? pclose(cat) : -1;
    FILE *out = popen("dd of=w status=none", "w");
    if (out)
        fputs("written\n", out);
    int wrote = out ? pclose(out) : -1;
    errno = 0;
    FILE *bad = popen("true", "x");
    int refused = bad == NULL && errno == EINVAL;
    FILE *four = popen("exit 4", "re");
    int exited = four ? pclose(four) : -1;
    printf("%d %d %d %d %d %d %d %s", WEXITSTATUS(found), WEXITSTATUS(three),
           WEXITSTATUS(piped), WEXITSTATUS(catted), WEXITSTATUS(wrote), refused,
           WEXITSTATUS(exited), line);
    return 0;
}
"#;

/// A program started in a served working directory works there, also through `system` and
/// `popen` (whose shells the C library starts where no preload sees them: they used to find
/// nothing; a `popen` stream reads a served file and writes one, its `pclose` returns the
/// shell's status, a bad mode is `EINVAL`); where it cannot serve it (the shell holds the
/// pool, the program runs without the library) it finds nothing, never the files of the
/// directory the shell was in before: after `cd $P/d`, `rm -f a` used to delete the kernel's
/// `./a`.
#[test]
fn a_program_started_in_a_served_directory_runs_there_or_finds_nothing() {
    let _serial = serial();
    if !have("bash") {
        eprintln!("SKIPPED: bash is not installed");
        return;
    }
    let Some(shell_calls) = compile("shell-calls", SHELL_CALLS) else {
        eprintln!("SKIPPED: gcc is not installed");
        return;
    };
    let pool = TestPool::new("cwd", 16 << 20);
    let outside = std::env::temp_dir().join(format!("ferrite-preload-cwd-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&outside);
    std::fs::create_dir(&outside).expect("outside dir");
    for name in ["a", "b", "c"] {
        std::fs::write(outside.join(name), b"outside\n").expect("outside file");
    }
    let script = "mkdir $P/d && for f in a b c; do echo inside > $P/d/$f; done && cd $P/d \
                  && rm -f a && cat b && python3 -c 'import os; print(os.getcwd())' \
                  && $SHELL_CALLS \
                  && env -u LD_PRELOAD rm -f b && ! env -u LD_PRELOAD touch new 2>/dev/null \
                  && exec 3> $P/held && { rm -f c 2>/dev/null || echo refused; } \
                  && exec 3>&- && ls";
    let out = pool
        .command("bash")
        .env("P", PREFIX)
        .env("SHELL_CALLS", &shell_calls)
        .args(["-c", script])
        .current_dir(&outside)
        .output()
        .expect("bash");
    let left: Vec<_> = ["a", "b", "c", "new"]
        .iter()
        .map(|name| std::fs::read(outside.join(name)).ok())
        .collect();
    let _ = std::fs::remove_dir_all(&outside);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout,
        format!("inside\n{PREFIX}/d\n0 3 0 0 0 1 4 inside\nrefused\nb\nc\nw\n")
    );
    let kept = Some(b"outside\n".to_vec());
    assert_eq!(
        left,
        [kept.clone(), kept.clone(), kept, None],
        "the kernel's directory"
    );
    let px = pool.mount_and_check();
    assert_eq!(
        read_file(&px, "/d/a"),
        None,
        "rm -f a ran in the served directory"
    );
    assert_eq!(read_file(&px, "/d/b").expect("b"), b"inside\n");
    assert_eq!(read_file(&px, "/d/c").expect("c"), b"inside\n");
    assert_eq!(
        read_file(&px, "/d/w").expect("w, written through popen"),
        b"written\n"
    );
    px.into_fs().unmount().expect("unmount");
}

/// `popen` in a served working directory as glibc's: a stream closed with `fclose` instead
/// of `pclose` is done with (its shell waited for, nothing left behind for a later stream
/// that gets the same `FILE` address), then the modes glibc accepts and refuses, and a
/// large output read through the pipe. One line per check.
const POPEN_PROGRAM: &str = r#"
#include <errno.h>
#include <stdio.h>
#include <sys/wait.h>
int main(void) {
    FILE *closed = popen("exit 5", "r");
    if (closed)
        fclose(closed);
    FILE *next = popen("exit 6", "r");
    int status = next ? pclose(next) : -1;
    int left = 0;
    while (waitpid(-1, NULL, 0) > 0)
        left++;
    printf("after fclose: status %d, unwaited %d\n", status == -1 ? -1 : WEXITSTATUS(status),
           left);
    const char *modes[] = {"r", "w", "re", "we", "er", "rr", "ew", "rw", "", "e", "r+", "x"};
    for (unsigned i = 0; i < sizeof modes / sizeof *modes; i++) {
        errno = 0;
        FILE *p = popen("exit 0", modes[i]);
        printf("%s'%s' %s", i ? ", " : "", modes[i], p ? "ok" : errno == EINVAL ? "EINVAL" : "?");
        if (p)
            pclose(p);
    }
    printf("\n");
    FILE *big = popen("cat big", "r");
    long bytes = 0;
    while (big && getc(big) != EOF)
        bytes++;
    status = big ? pclose(big) : -1;
    printf("read %ld, status %d\n", bytes, status == -1 ? -1 : WEXITSTATUS(status));
    return 0;
}
"#;

#[test]
fn popen_in_a_served_directory_behaves_as_the_c_librarys() {
    let _serial = serial();
    if !have("bash") {
        eprintln!("SKIPPED: bash is not installed");
        return;
    }
    let Some(program) = compile("popen", POPEN_PROGRAM) else {
        eprintln!("SKIPPED: gcc is not installed");
        return;
    };
    let pool = TestPool::new("popen", 16 << 20);
    // `big` is larger than a pipe's buffer (64 KiB): the shell blocks until it is read.
    let out = run(pool
        .command("bash")
        .env("P", PREFIX)
        .env("PROGRAM", &program)
        .args([
            "-c",
            "mkdir $P/d && seq 1 20000 > $P/d/big && cd $P/d && $PROGRAM",
        ]));
    assert_eq!(
        out,
        "after fclose: status 6, unwaited 0\n\
         'r' ok, 'w' ok, 're' ok, 'we' ok, 'er' ok, 'rr' ok, 'ew' ok, \
         'rw' EINVAL, '' EINVAL, 'e' EINVAL, 'r+' EINVAL, 'x' EINVAL\n\
         read 108894, status 0\n"
    );
    pool.mount_and_check().into_fs().unmount().expect("unmount");
}

#[test]
fn a_handover_variable_set_by_hand_never_serves_a_real_descriptor() {
    let _serial = serial();
    let pool = TestPool::new("forged", 16 << 20);
    pool.sh("printf 'kept\\n' > $P/target");
    let px = pool.mount_and_check();
    let ino = px.stat("/target").expect("target").ino;
    px.into_fs().unmount().expect("unmount");
    let path_hex: String = "/target".bytes().map(|b| format!("{b:02x}")).collect();
    // Descriptor 1 is the test's pipe, not a placeholder: the variable must be ignored.
    let forged = format!("1,{},0,{ino},{path_hex}", libc::O_WRONLY);
    let out = run(pool
        .command("echo")
        .env("PMFS_PRELOAD_HANDOVER", forged)
        .arg("to the pipe"));
    assert_eq!(out, "to the pipe\n");
    let px = pool.mount_and_check();
    assert_eq!(read_file(&px, "/target").expect("target"), b"kept\n");
    px.into_fs().unmount().expect("unmount");
}

const FORK_PROGRAM: &str = r#"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* A parent holding a served file forks: the child cannot use the parent's served state
   (its descriptor is a placeholder, the pool is the parent's); once the parent holds
   nothing, a child mounts the pool for itself. */
int main(int argc, char **argv) {
    char held[512], other[512], later[512];
    snprintf(held, sizeof held, "%s/held", argv[1]);
    snprintf(other, sizeof other, "%s/other", argv[1]);
    snprintf(later, sizeof later, "%s/later", argv[1]);
    int fd = open(held, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, "parent\n", 7) != 7) { perror("parent"); return 1; }
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        int w = write(fd, "child\n", 6);
        int write_errno = errno;
        int o = open(other, O_WRONLY | O_CREAT, 0644);
        int open_errno = errno;
        printf("child: write %s, open %s\n",
               w < 0 && write_errno == EBADF ? "EBADF" : "served",
               o < 0 && open_errno == EBUSY ? "EBUSY" : "served");
        fflush(stdout);
        _exit(0);
    }
    int status;
    waitpid(child, &status, 0);
    if (write(fd, "again\n", 6) != 6) { perror("parent again"); return 1; }
    close(fd);
    fflush(stdout);
    child = fork();
    if (child == 0) {
        int l = open(later, O_WRONLY | O_CREAT, 0644);
        printf("second child: %s\n", l >= 0 && write(l, "child\n", 6) == 6 ? "served" : "refused");
        fflush(stdout);
        _exit(0);
    }
    waitpid(child, &status, 0);
    return 0;
}
"#;

#[test]
fn a_forked_child_never_uses_its_parents_served_state() {
    let _serial = serial();
    let Some(program) = compile("fork", FORK_PROGRAM) else {
        eprintln!("SKIPPED: gcc is not installed");
        return;
    };
    let pool = TestPool::new("fork", 16 << 20);
    let out = run(pool.command(program.to_str().unwrap()).arg(PREFIX));
    assert_eq!(
        out,
        "child: write EBADF, open EBUSY\nsecond child: served\n"
    );
    let px = pool.mount_and_check();
    assert_eq!(read_file(&px, "/held").expect("held"), b"parent\nagain\n");
    assert_eq!(read_file(&px, "/other"), None);
    assert_eq!(read_file(&px, "/later").expect("later"), b"child\n");
    px.into_fs().unmount().expect("unmount");
}

/// A pipeline started from a served working directory: bash looks each command up in
/// `PATH` in the child it forked for it, and that lookup `stat`s `.`, a served call, so
/// every stage's shell child mounts the pool for a moment before it execs its program.
/// The stage that reads a served file then found the pool held by its neighbour's shell
/// child about one time in five (`grep: f: Device or resource busy`, an empty count, one
/// "cannot serve" line per stage on stderr). A busy pool is now waited for, briefly, before
/// `EBUSY`: such a holder lets it go within milliseconds.
#[test]
fn a_pipeline_in_a_served_directory_never_finds_the_pool_busy() {
    let _serial = serial();
    if !have("bash") {
        eprintln!("SKIPPED: bash is not installed");
        return;
    }
    let pool = TestPool::new("pipeline", 16 << 20);
    let rounds = 40;
    let script = format!(
        "mkdir $P/d && seq 1 100 > $P/d/f && cd $P/d && \
         for i in $(seq {rounds}); do grep -c . f | cat; wc -l < /dev/null | cat; done"
    );
    let output = pool
        .command("bash")
        .env("P", PREFIX)
        .args(["-c", &script])
        .output()
        .expect("bash");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(stdout, "100\n0\n".repeat(rounds), "stderr: {stderr}");
    assert_eq!(stderr, "", "no stage may find the pool busy");
    pool.mount_and_check().into_fs().unmount().expect("unmount");
}
