//! Statements planned again as their table grows.
//!
//! PostgreSQL keeps the generic plan a prepared statement settles on (after five runs) until
//! its table is analyzed. A statement that joins the events of a turn or a group to the table
//! (a turn of takes or completions, a group's claims), planned while the table was nearly empty
//! (a new table, before autovacuum's first `ANALYZE`), joins them by scanning the whole table,
//! and goes on scanning it however large it grows. So such a statement's text names a
//! **generation**, bumped at its 64th run and at every doubling after it: each new text is
//! prepared and planned again, for the table as it is by then. That is a few plans over a
//! process's life, and a table that grew from nothing is read by its indexes once it is large
//! enough for them to pay. (MariaDB and SQLite plan each run, or by rules, anyway: there the new
//! text only costs one more prepare.)

use std::sync::atomic::{AtomicU64, Ordering};

/// The run at which a statement is first planned again; then at every doubling of its runs.
const FIRST_REPLAN: u64 = 64;

/// Counts a statement's runs, and answers the generation of its plans for each.
#[derive(Debug, Default)]
pub(crate) struct Generations {
    runs: AtomicU64,
}

impl Generations {
    /// The generation of the next run (which this counts).
    pub(crate) fn next_run(&self) -> u32 {
        generation(self.runs.fetch_add(1, Ordering::Relaxed))
    }
}

/// `statement` as the text of `generation`: unchanged for the first, after a comment that names
/// the generation for the others.
pub(crate) fn in_generation(statement: &str, generation: u32) -> String {
    match generation {
        0 => statement.to_owned(),
        generation => format!("/* plan {generation} */ {statement}"),
    }
}

/// The generation of a statement's plans at its run `run` (from 0): 0 before
/// [`FIRST_REPLAN`], then one more at each doubling.
fn generation(run: u64) -> u32 {
    match run / FIRST_REPLAN {
        0 => 0,
        doublings => doublings.ilog2() + 1,
    }
}

#[cfg(test)]
mod tests {
    use super::{Generations, generation, in_generation};

    #[test]
    fn the_plans_are_renewed_at_the_64th_run_and_at_every_doubling_after_it() {
        let at = |runs: &[u64]| runs.iter().map(|&run| generation(run)).collect::<Vec<_>>();
        assert_eq!(at(&[0, 1, 63]), [0, 0, 0]);
        assert_eq!(
            at(&[64, 127, 128, 255, 256, 511, 512]),
            [1, 1, 2, 2, 3, 3, 4]
        );
        assert_eq!(generation(u64::MAX), 58);

        let generations = Generations::default();
        let first: Vec<u32> = (0..130).map(|_| generations.next_run()).collect();
        assert_eq!((first[63], first[64], first[127], first[128]), (0, 1, 1, 2));
    }

    #[test]
    fn a_generation_after_the_first_renews_the_text_by_a_comment() {
        assert_eq!(in_generation("SELECT 1", 0), "SELECT 1");
        assert_eq!(in_generation("SELECT 1", 3), "/* plan 3 */ SELECT 1");
    }
}
