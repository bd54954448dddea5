//! Findings of the deep integrity checks (`ferrite pool check`): each persistent structure's
//! owner crate checks it read-only and reports what it found in these terms, so the command
//! can print, count and serialise findings without knowing the formats.

use serde::Serialize;

/// How a finding bears on the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    /// Damage: bytes that no crash can leave behind. The engine refuses to open the pool
    /// (unless asked to salvage), and the check exits non-zero.
    Damage,
    /// A state a crash leaves behind, which the next open's recovery handles: a torn log
    /// tail it discards, records it replays, a transaction it rolls back.
    Recovery,
    /// Information: usage, the engine in use, what was not checked.
    Note,
}

impl Severity {
    /// Lower-case name, as in the JSON form.
    pub const fn name(self) -> &'static str {
        match self {
            Severity::Damage => "damage",
            Severity::Recovery => "recovery",
            Severity::Note => "note",
        }
    }
}

/// One thing a deep check found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// How it bears on the pool.
    pub severity: Severity,
    /// The structure, as its format document names it ("redo lane 2", "heap bitmap").
    pub structure: String,
    /// The pool offset of the bytes concerned, when there is one.
    pub offset: Option<u64>,
    /// What was found.
    pub message: String,
}

impl Finding {
    /// A finding of `severity` about `structure` at `offset`.
    pub fn new(
        severity: Severity,
        structure: impl Into<String>,
        offset: Option<u64>,
        message: impl Into<String>,
    ) -> Self {
        Finding {
            severity,
            structure: structure.into(),
            offset,
            message: message.into(),
        }
    }

    /// Damage to `structure` at `offset`.
    pub fn damage(structure: impl Into<String>, offset: u64, message: impl Into<String>) -> Self {
        Self::new(Severity::Damage, structure, Some(offset), message)
    }

    /// Whether this finding is damage.
    pub fn is_damage(&self) -> bool {
        self.severity == Severity::Damage
    }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.severity.name(), self.structure)?;
        if let Some(offset) = self.offset {
            write!(f, " at {offset:#x}")?;
        }
        write!(f, ": {}", self.message)
    }
}
