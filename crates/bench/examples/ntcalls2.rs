use pmem::{CreateOptions, Persist, Pool, WriteClass};
use std::time::Instant;
use tx::{LogMode, logwriter::LogWriter};
fn main() {
    let path = std::path::Path::new("/dev/shm/ntcalls2.pool");
    let _ = std::fs::remove_file(path);
    let pool = Pool::create(path, &CreateOptions::new("x", 128 << 20)).unwrap();
    let _ = std::fs::remove_file(path);
    let pm = pool.pm();
    let ring = pool.arena().offset;
    let array = ring + (4 << 20);
    pm.fill(ring, 100 << 20, 0, WriteClass::Log);
    let elements = (64u64 << 20) / 8;
    let with_array = std::env::args().nth(1).is_some();
    for round in 0..3 {
        for mode in [LogMode::NonTemporal, LogMode::Packed] {
            let mut w = LogWriter::new(mode);
            let mut bytes = vec![0u8; 128];
            let mut head = 0u64;
            let start = Instant::now();
            for u in 0..200_000u64 {
                bytes
                    .iter_mut()
                    .enumerate()
                    .for_each(|(i, b)| *b = (u as u8).wrapping_add(i as u8));
                if head + 128 > (4 << 20) {
                    head = 0;
                }
                w.append(pm, ring + head, &bytes);
                head += 128;
                if u % 8 == 7 {
                    w.seal(pm);
                    pm.fence();
                }
                if with_array {
                    let m = (u ^ (u >> 29)).wrapping_mul(0xBF58_476D_1CE4_E5B9) >> 7;
                    pm.write_u64(array + 8 * (m % elements), u, WriteClass::User);
                }
            }
            println!(
                "round {round} {mode:?}: {:.1} ns",
                start.elapsed().as_nanos() as f64 / 200_000.0
            );
        }
    }
}
