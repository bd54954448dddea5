//! A private copy-on-write view of a pool file: the backend the offline checker mounts, so
//! that recovery (journal rollback, truncate list) runs on the view and never writes the
//! file. Reads come from the file; a store copies its 4 KiB page into memory first. Memory
//! is the pages recovery changed plus the checker's own structures, never the pool's size.

use parking_lot::{Mutex, RwLock};
use pmem::{Persist, Stats, WriteClass, assert_in_bounds};
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;

const PAGE: u64 = 4096;

/// A pool file seen through private copies of the pages written to it.
#[derive(Debug)]
pub struct OverlayPm {
    file: File,
    len: u64,
    pages: RwLock<HashMap<u64, Box<[u8]>>>,
    /// The first read error (the bytes read as zeros; the check reports it).
    failed: Mutex<Option<std::io::Error>>,
    stats: Stats,
}

impl OverlayPm {
    /// A view of the first `len` bytes of `file`.
    pub fn new(file: File, len: u64) -> Self {
        OverlayPm {
            file,
            len,
            pages: RwLock::new(HashMap::new()),
            failed: Mutex::new(None),
            stats: Stats::new(),
        }
    }

    fn read_file(&self, off: u64, dst: &mut [u8]) {
        if let Err(error) = self.file.read_exact_at(dst, off) {
            dst.fill(0);
            self.failed.lock().get_or_insert(error);
        }
    }

    /// The first error reading the file, if any (taken).
    pub fn take_error(&self) -> Option<std::io::Error> {
        self.failed.lock().take()
    }

    /// Bytes at or past `from` that differ from the file: what recovery rewrote.
    pub fn changed_bytes(&self, from: u64) -> u64 {
        let pages = self.pages.read();
        let mut original = vec![0u8; PAGE as usize];
        pages
            .iter()
            .map(|(&page, copy)| {
                let at = page * PAGE;
                let n = copy.len();
                self.read_file(at, &mut original[..n]);
                (0..n)
                    .filter(|&i| at + i as u64 >= from && copy[i] != original[i])
                    .count() as u64
            })
            .sum()
    }

    /// Pages copied so far.
    pub fn copied_pages(&self) -> usize {
        self.pages.read().len()
    }
}

/// The pieces of `[off, off + len)` per page: (page, offset in page, offset in buffer, n).
fn pieces(off: u64, len: usize) -> impl Iterator<Item = (u64, usize, usize, usize)> {
    let mut done = 0usize;
    std::iter::from_fn(move || {
        if done >= len {
            return None;
        }
        let at = off + done as u64;
        let within = (at % PAGE) as usize;
        let n = (PAGE as usize - within).min(len - done);
        let piece = (at / PAGE, within, done, n);
        done += n;
        Some(piece)
    })
}

impl Persist for OverlayPm {
    fn len(&self) -> u64 {
        self.len
    }

    fn read(&self, off: u64, dst: &mut [u8]) {
        assert_in_bounds(off, dst.len() as u64, self.len);
        let pages = self.pages.read();
        for (page, within, at, n) in pieces(off, dst.len()) {
            match pages.get(&page) {
                Some(copy) => dst[at..at + n].copy_from_slice(&copy[within..within + n]),
                None => self.read_file(page * PAGE + within as u64, &mut dst[at..at + n]),
            }
        }
    }

    fn write(&self, off: u64, src: &[u8], class: WriteClass) {
        assert_in_bounds(off, src.len() as u64, self.len);
        let mut pages = self.pages.write();
        for (page, within, at, n) in pieces(off, src.len()) {
            let copy = pages.entry(page).or_insert_with(|| {
                let size = (self.len - page * PAGE).min(PAGE) as usize;
                let mut bytes = vec![0u8; size].into_boxed_slice();
                self.read_file(page * PAGE, &mut bytes);
                bytes
            });
            copy[within..within + n].copy_from_slice(&src[at..at + n]);
        }
        self.stats.record_store(class, src.len() as u64);
    }

    fn write_nt(&self, off: u64, src: &[u8], class: WriteClass) {
        self.write(off, src, class);
    }

    fn flush(&self, off: u64, len: u64) {
        assert_in_bounds(off, len, self.len);
    }

    fn fence(&self) {
        self.stats.record_fence();
    }

    fn stats(&self) -> &Stats {
        &self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_stay_in_the_view_and_count_as_changes() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("image");
        let image: Vec<u8> = (0..3 * PAGE + 100).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &image).expect("write");
        let pm = OverlayPm::new(File::open(&path).expect("open"), image.len() as u64);
        pm.write(PAGE - 2, &[0xEE; 4], WriteClass::Meta);
        let mut back = vec![0u8; 8];
        pm.read(PAGE - 4, &mut back);
        assert_eq!(&back[2..6], &[0xEE; 4]);
        assert_eq!(&back[..2], &image[(PAGE - 4) as usize..(PAGE - 2) as usize]);
        assert_eq!(pm.copied_pages(), 2);
        assert_eq!(pm.changed_bytes(0), 4);
        assert_eq!(pm.changed_bytes(PAGE), 2);
        assert_eq!(
            std::fs::read(&path).expect("read"),
            image,
            "the file is untouched"
        );
        assert!(pm.take_error().is_none());
    }
}
