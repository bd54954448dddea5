//! The transaction structure of a trace's streams: every `TxBegin` closed by a `TxEnd`
//! before the next `TxBegin`, every store inside a transaction. The format's decoder checks
//! each event on its own; this checks how they nest, for traces made by hand or by other
//! tools before they are simulated.

use crate::{Event, Trace};

/// What breaks a stream's transaction structure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Violation {
    /// A `TxBegin` while a transaction is open.
    NestedBegin,
    /// A `TxEnd` with no open transaction.
    EndWithoutBegin,
    /// A store with no open transaction.
    StoreOutsideTransaction,
    /// The stream ends inside a transaction.
    UnclosedTransaction,
}

impl Violation {
    fn describe(self) -> &'static str {
        match self {
            Violation::NestedBegin => "TxBegin inside an open transaction",
            Violation::EndWithoutBegin => "TxEnd without an open transaction",
            Violation::StoreOutsideTransaction => "store outside a transaction",
            Violation::UnclosedTransaction => "the stream ends inside a transaction",
        }
    }
}

/// A malformed transaction structure: the stream, the event's index in it, and what is wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("stream {stream}, event {event}: {}", .violation.describe())]
pub struct StructureError {
    /// Index of the stream in the trace.
    pub stream: usize,
    /// Index of the offending event in the stream (the event count for an unclosed end).
    pub event: u64,
    /// What is wrong.
    pub violation: Violation,
}

impl Trace {
    /// Checks every stream's transaction structure; the first violation found.
    pub fn check_transactions(&self) -> Result<(), StructureError> {
        (0..self.cores()).try_for_each(|stream| self.check_stream(stream))
    }

    fn check_stream(&self, stream: usize) -> Result<(), StructureError> {
        let fail = |event, violation| StructureError {
            stream,
            event,
            violation,
        };
        let mut open = false;
        let mut index = 0u64;
        for event in self.events(stream) {
            match (event, open) {
                (Event::TxBegin, true) => return Err(fail(index, Violation::NestedBegin)),
                (Event::TxEnd, false) => return Err(fail(index, Violation::EndWithoutBegin)),
                (Event::Store { .. }, false) => {
                    return Err(fail(index, Violation::StoreOutsideTransaction));
                }
                (Event::TxBegin, false) | (Event::TxEnd, true) => open = !open,
                _ => {}
            }
            index += 1;
        }
        if open {
            return Err(fail(index, Violation::UnclosedTransaction));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Encoder, TraceMeta};

    fn one_stream(events: &[Event]) -> Trace {
        let mut encoder = Encoder::default();
        for event in events {
            encoder.push(event);
        }
        let mut trace = Trace::new(TraceMeta::default());
        trace.add_stream(0, encoder);
        trace
    }

    fn violation(events: &[Event]) -> Option<(u64, Violation)> {
        let error = one_stream(events).check_transactions().err()?;
        Some((error.event, error.violation))
    }

    #[test]
    fn each_malformed_structure_is_named_with_its_event() {
        let store = Event::Store {
            addr: 64,
            size: 8,
            old: 0,
            new: 1,
        };
        let (begin, end) = (Event::TxBegin, Event::TxEnd);
        assert_eq!(violation(&[begin, store, end]), None);
        assert_eq!(violation(&[end]), Some((0, Violation::EndWithoutBegin)));
        assert_eq!(
            violation(&[begin, begin]),
            Some((1, Violation::NestedBegin))
        );
        assert_eq!(
            violation(&[begin, end, store]),
            Some((2, Violation::StoreOutsideTransaction))
        );
        assert_eq!(
            violation(&[begin, store]),
            Some((2, Violation::UnclosedTransaction))
        );
        let error = one_stream(&[end]).check_transactions().unwrap_err();
        assert_eq!(
            error.to_string(),
            "stream 0, event 0: TxEnd without an open transaction"
        );
    }
}
