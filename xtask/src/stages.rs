//! A run of named stages with their wall-clock seconds, printed as a table.

use std::fmt::Write as _;
use std::time::Instant;

/// Which stages run and how long each took.
#[derive(Debug)]
pub struct Stages {
    only: Option<String>,
    skip: Vec<String>,
    ran: Vec<(String, f64, bool)>,
    start: Instant,
}

impl Stages {
    /// Runs every stage except those in `skip`, or only `only` when given.
    pub fn new(only: Option<String>, skip: Vec<String>) -> Self {
        Self {
            only,
            skip,
            ran: Vec::new(),
            start: Instant::now(),
        }
    }

    /// Whether stage `name` is selected.
    pub fn selected(&self, name: &str) -> bool {
        match &self.only {
            Some(only) => only == name,
            None => !self.skip.iter().any(|s| s == name),
        }
    }

    /// Runs `f` as stage `name` if it is selected, timing it; a failure is recorded and returned.
    pub fn run(
        &mut self,
        name: &str,
        f: impl FnOnce() -> Result<(), String>,
    ) -> Result<(), String> {
        self.run_noted(name, "", f)
    }

    /// [`run`](Self::run), printing `note` (what the stage does, how long it takes) as it
    /// starts.
    pub fn run_noted(
        &mut self,
        name: &str,
        note: &str,
        f: impl FnOnce() -> Result<(), String>,
    ) -> Result<(), String> {
        if !self.selected(name) {
            return Ok(());
        }
        if note.is_empty() {
            eprintln!("\n#### stage {name}");
        } else {
            eprintln!("\n#### stage {name}: {note}");
        }
        let start = Instant::now();
        let result = f();
        let secs = start.elapsed().as_secs_f64();
        eprintln!(
            "#### stage {name}: {secs:.0} s{}",
            if result.is_ok() { "" } else { " (failed)" }
        );
        self.ran.push((name.to_string(), secs, result.is_ok()));
        result
    }

    /// The table of the stages run so far, with the total since the start.
    pub fn table(&self) -> String {
        let mut t = String::from("\nstage                 seconds\n");
        for (name, secs, ok) in &self.ran {
            let _ = writeln!(
                t,
                "{name:<21} {secs:>7.0}{}",
                if *ok { "" } else { "  FAILED" }
            );
        }
        let _ = writeln!(
            t,
            "{:<21} {:>7.0}",
            "total so far",
            self.start.elapsed().as_secs_f64()
        );
        t
    }
}
