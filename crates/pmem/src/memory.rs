//! A private in-memory copy of a pool: the backend of read-only tools (`ferrite pool check`,
//! the PMFS offline checker), on which recovery or a check runs without ever writing the
//! file, and of tests that damage pool images.

use crate::seam::{Persist, WriteClass, assert_in_bounds};
use crate::stats::Stats;
use parking_lot::RwLock;

/// A pool image in DRAM. Stores land in the copy at once; flushes and fences only count.
#[derive(Debug)]
pub struct MemPm {
    bytes: RwLock<Vec<u8>>,
    stats: Stats,
}

impl MemPm {
    /// A backend over `image` (the whole pool file).
    pub fn new(image: Vec<u8>) -> Self {
        MemPm {
            bytes: RwLock::new(image),
            stats: Stats::new(),
        }
    }

    /// The copy as it is now (after any recovery that ran on it).
    pub fn image(&self) -> Vec<u8> {
        self.bytes.read().clone()
    }
}

impl Persist for MemPm {
    fn len(&self) -> u64 {
        self.bytes.read().len() as u64
    }

    fn read(&self, off: u64, dst: &mut [u8]) {
        let bytes = self.bytes.read();
        assert_in_bounds(off, dst.len() as u64, bytes.len() as u64);
        dst.copy_from_slice(&bytes[off as usize..off as usize + dst.len()]);
    }

    fn write(&self, off: u64, src: &[u8], class: WriteClass) {
        let mut bytes = self.bytes.write();
        assert_in_bounds(off, src.len() as u64, bytes.len() as u64);
        bytes[off as usize..off as usize + src.len()].copy_from_slice(src);
        self.stats.record_store(class, src.len() as u64);
    }

    fn write_nt(&self, off: u64, src: &[u8], class: WriteClass) {
        self.write(off, src, class);
    }

    fn flush(&self, off: u64, len: u64) {
        assert_in_bounds(off, len, self.len());
    }

    fn fence(&self) {
        self.stats.record_fence();
    }

    fn stats(&self) -> &Stats {
        &self.stats
    }
}
