use pmem::{CreateOptions, Persist, Pool, WriteClass};
use std::time::Instant;
fn main() {
    let path = std::path::Path::new("/dev/shm/ntcalls.pool");
    let _ = std::fs::remove_file(path);
    let pool = Pool::create(path, &CreateOptions::new("x", 64 << 20)).unwrap();
    let _ = std::fs::remove_file(path);
    let pm = pool.pm();
    let base = pool.arena().offset;
    pm.fill(base, 32 << 20, 0, WriteClass::Log);
    let rec = [7u8; 128];
    for round in 0..3 {
        for mode in 0..3 {
            let start = Instant::now();
            let mut head = 0u64;
            for u in 0..200_000u64 {
                if head + 128 > (4 << 20) {
                    head = 0;
                }
                match mode {
                    0 => pm.write_nt(base + head, &rec, WriteClass::Log),
                    1 => {
                        pm.write_nt(base + head, &rec[..64], WriteClass::Log);
                        pm.write_nt(base + head + 64, &rec[64..], WriteClass::Log);
                    }
                    _ => {
                        let mut w = tx::logwriter::LogWriter::new(tx::LogMode::Packed);
                        w.append(pm, base + head, &rec);
                        w.seal(pm);
                    }
                }
                head += 128;
                if u % 8 == 7 {
                    pm.fence();
                }
            }
            println!(
                "round {round} mode {mode}: {:.1} ns",
                start.elapsed().as_nanos() as f64 / 200_000.0
            );
        }
    }
}
