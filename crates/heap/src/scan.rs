//! Reading a heap's persistent state back into the DRAM index: the descriptors, run markers
//! and bitmap words, each validated as it is read. [`Heap::open`](crate::Heap::open) stops at
//! the first problem; the deep check ([`crate::check`]) goes on and reports every problem.

use crate::alloc::{ChunkUse, Run, State, mark_span};
use crate::layout::{
    BITMAP_WORD, Descriptor, Layout, MARKER_WORD, SIZE_CLASSES, UNITS_PER_WORD, marker_class,
};
use pmem::Persist;
use pmem::checked;

/// One inconsistency in the heap's persistent state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Problem {
    /// Where the offending word is.
    pub offset: u64,
    /// What is wrong.
    pub message: String,
}

/// What a scan read back.
pub(crate) struct Scanned {
    /// The DRAM index.
    pub state: State,
    /// The problems found (only the first one if the scan stopped there).
    pub problems: Vec<Problem>,
    /// FREE chunks whose first word is still a valid run marker, over a bitmap with no
    /// allocated unit: what a crash between the two actions of a run's creation or return
    /// leaves. Harmless as long as the chunk stays free (section 9 of `docs/heap-format.md`).
    pub stale_markers: Vec<u64>,
}

/// Rebuilds the DRAM index from the media, and the problems found on the way (only the first
/// one if `first_only`). After a problem the scan goes on as if the word were absent: a bad
/// descriptor or marker leaves its chunk out of the index, a bad bitmap word counts no unit.
pub(crate) fn scan<P: Persist>(pm: &P, layout: &Layout, first_only: bool) -> Scanned {
    let mut scanner = Scanner {
        pm,
        layout,
        scanned: Scanned {
            state: State {
                chunks: vec![ChunkUse::Free; layout.chunk_count as usize],
                available: vec![Vec::new(); SIZE_CLASSES.len()],
                ..State::default()
            },
            problems: Vec::new(),
            stale_markers: Vec::new(),
        },
    };
    let mut chunk = 0;
    let go_on = |scanner: &Scanner<'_, P>| !first_only || scanner.scanned.problems.is_empty();
    while chunk < layout.chunk_count && go_on(&scanner) {
        chunk += scanner.chunk(chunk);
    }
    scanner.scanned
}

struct Scanner<'a, P> {
    pm: &'a P,
    layout: &'a Layout,
    scanned: Scanned,
}

impl<P: Persist> Scanner<'_, P> {
    fn problem(&mut self, offset: u64, message: String) {
        self.scanned.problems.push(Problem { offset, message });
    }

    /// Reads chunk `chunk` and returns how many chunks it covers.
    fn chunk(&mut self, chunk: u64) -> u64 {
        let at = self.layout.descriptor_at(chunk);
        match Descriptor::decode(self.pm.read_u64(at), chunk) {
            Err(error) => {
                self.problem(at, error.to_string());
                1
            }
            Ok(Descriptor::Free) => {
                if self.orphaned_run(chunk, "free chunk") == Marker::Stale {
                    self.scanned.stale_markers.push(chunk);
                }
                1
            }
            Ok(Descriptor::Run { class }) => {
                self.run(chunk, class);
                1
            }
            Ok(Descriptor::Large { span }) => self.span(chunk, span),
        }
    }

    fn run(&mut self, chunk: u64, class: u8) {
        let Some(geometry) = self.layout.run_geometry(usize::from(class)) else {
            let at = self.layout.descriptor_at(chunk);
            self.problem(
                at,
                format!("chunk {chunk} is a run of unusable class {class}"),
            );
            return;
        };
        let start = self.layout.chunk_start(chunk);
        match checked::open(self.pm.read_u64(start), start, MARKER_WORD) {
            Err(error) => return self.problem(start, format!("run in chunk {chunk}: {error}")),
            Ok(value) if marker_class(value) != Some(class) => {
                return self.problem(
                    start,
                    format!(
                        "chunk {chunk}: its descriptor says a run of class {class}, its marker \
                         {}",
                        marker_text(value)
                    ),
                );
            }
            Ok(_) => {}
        }
        let used = self.bitmap(chunk, geometry.bitmap_words);
        let tail_bits = geometry.units % UNITS_PER_WORD;
        if tail_bits != 0 && used.last().is_some_and(|&last| last >> tail_bits != 0) {
            let at = self.layout.bitmap_word_at(chunk, geometry.bitmap_words - 1);
            self.problem(at, format!("run in chunk {chunk} marks units past its end"));
        }
        self.add_run(chunk, usize::from(class), geometry, used);
    }

    /// The run's bitmap words; a word that fails its check is reported and counts no unit.
    fn bitmap(&mut self, chunk: u64, words: u64) -> Vec<u64> {
        (0..words)
            .map(|word| {
                let at = self.layout.bitmap_word_at(chunk, word);
                checked::open(self.pm.read_u64(at), at, BITMAP_WORD).unwrap_or_else(|error| {
                    self.problem(at, format!("run in chunk {chunk}: {error}"));
                    0
                })
            })
            .collect()
    }

    fn add_run(
        &mut self,
        chunk: u64,
        class: usize,
        geometry: crate::layout::RunGeometry,
        used: Vec<u64>,
    ) {
        let state = &mut self.scanned.state;
        let taken: u64 = used.iter().map(|w| u64::from(w.count_ones())).sum();
        let taken = taken.min(geometry.units);
        let index = state.runs.len() as u32;
        state.allocated_bytes += taken * geometry.unit;
        state.allocated_blocks += taken;
        state.chunks[chunk as usize] = ChunkUse::Run(index);
        let listed = taken < geometry.units;
        if listed {
            state.available[class].push(index);
        }
        state.runs.push(Run {
            chunk,
            class,
            geometry,
            used,
            free_units: geometry.units - taken,
            hint: 0,
            listed,
        });
    }

    fn span(&mut self, chunk: u64, span: u32) -> u64 {
        let end = chunk
            .checked_add(u64::from(span))
            .filter(|&end| span > 0 && end <= self.layout.chunk_count);
        let Some(end) = end else {
            let at = self.layout.descriptor_at(chunk);
            self.problem(at, format!("large span at chunk {chunk} of {span} chunks"));
            return 1;
        };
        for body in chunk + 1..end {
            let at = self.layout.descriptor_at(body);
            if self.pm.read_u64(at) != 0 {
                self.problem(at, format!("chunk {body} inside a large span is not free"));
            }
        }
        self.orphaned_run(chunk, "chunk, the head of a large span,");
        let state = &mut self.scanned.state;
        mark_span(state, chunk, span);
        state.allocated_bytes += u64::from(span) << self.layout.chunk_shift;
        state.allocated_blocks += 1;
        u64::from(span)
    }

    /// Reports a chunk that is not a run by its descriptor but holds a run's marker and an
    /// intact bitmap with allocated units: a run whose descriptor was lost or rewritten. (A
    /// crash between a run's initialisation and its descriptor, or between a return's
    /// descriptor and marker, leaves a marker over an empty bitmap: harmless, not reported,
    /// and [`Marker::Stale`]. Object data that forms a valid marker and bitmap for this very
    /// chunk would be reported too, and cannot happen by accident.)
    fn orphaned_run(&mut self, chunk: u64, what: &str) -> Marker {
        let start = self.layout.chunk_start(chunk);
        let read = |at: u64, name| checked::open(self.pm.read_u64(at), at, name).ok();
        let Some(class) = read(start, MARKER_WORD).and_then(marker_class) else {
            return Marker::None;
        };
        let Some(geometry) = self.layout.run_geometry(usize::from(class)) else {
            return Marker::Stale;
        };
        let units: Option<u64> = (0..geometry.bitmap_words)
            .map(|w| {
                read(self.layout.bitmap_word_at(chunk, w), BITMAP_WORD)
                    .map(|bits| u64::from(bits.count_ones()))
            })
            .sum();
        if let Some(units @ 1..) = units {
            self.problem(
                start,
                format!(
                    "{what} {chunk} holds the marker and bitmap of a run of class {class} with \
                     {units} allocated units: its descriptor was lost"
                ),
            );
            return Marker::Orphaned;
        }
        Marker::Stale
    }
}

/// What the first word of a chunk that is not a run says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Marker {
    /// Not a valid run marker.
    None,
    /// A valid run marker over a bitmap with allocated units (reported as a problem).
    Orphaned,
    /// A valid run marker with no allocated unit under it.
    Stale,
}

fn marker_text(value: u64) -> String {
    match marker_class(value) {
        Some(class) => format!("says class {class}"),
        None => format!("is not a run marker ({value:#x})"),
    }
}
