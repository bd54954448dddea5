//! Ideal: no persistence work at all. An upper bound on throughput; it promises nothing about
//! crashes, so crash checks do not apply (`crash_check` answers `Violation::NotApplicable`).
//! As the upper bound it has every memory feature, the on-PM buffer included.

use super::{Design, Step};
use crate::config::Config;
use crate::engine::Ctx;
use crate::pm::PmImage;

/// The ideal (persistence-oblivious) machine.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ideal;

impl Design for Ideal {
    fn name(&self) -> &'static str {
        "ideal"
    }

    fn crash_consistent(&self) -> bool {
        false
    }

    fn uses_onpm_buffer(&self, _cfg: &Config) -> bool {
        true
    }

    fn tx_end(&mut self, _ctx: &mut Ctx<'_>, _core: usize) -> Step {
        Step::Done
    }

    fn recover(&self, _pm: &mut PmImage) {}
}
