//! The reference model behind
//! [`store_follows_the_reference_model`](super::conformance::store_follows_the_reference_model):
//! the store rules, written as plainly as they read, over two events and three owners.

use std::{fmt, time::Duration};

use crate::store::{Claim, ClaimToken, Claimant, Completion, IdempotencyStore, Release, Renewal};

const EVENTS: usize = 2;
const OWNERS: usize = 3;
const TYPE: &str = super::fixtures::EVENT_TYPE;

/// One step of a history.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Step {
    Claim {
        event: usize,
        owner: usize,
        short: bool,
    },
    Renew {
        event: usize,
        owner: usize,
        short: bool,
    },
    Complete {
        event: usize,
        owner: usize,
        short: bool,
    },
    Release {
        event: usize,
        owner: usize,
    },
    /// Every short lease or retention written so far runs out.
    Wait,
}

/// A random history of 1 to 12 steps.
pub(crate) fn history(rng: &mut fastrand::Rng) -> Vec<Step> {
    (0..rng.usize(1..=12))
        .map(|_| {
            let (event, owner, short) = (rng.usize(..EVENTS), rng.usize(..OWNERS), rng.bool());
            match rng.u8(..9) {
                0..=2 => Step::Claim {
                    event,
                    owner,
                    short,
                },
                3 => Step::Renew {
                    event,
                    owner,
                    short,
                },
                4 | 5 => Step::Complete {
                    event,
                    owner,
                    short,
                },
                6 | 7 => Step::Release { event, owner },
                _ => Step::Wait,
            }
        })
        .collect()
}

#[derive(Clone, Copy, Debug)]
struct Record {
    owner: usize,
    completed: bool,
    /// The wait count at which a short record was written; `None` for a long one.
    written: Option<u32>,
}

/// What the rules say the store holds.
#[derive(Default)]
struct Model {
    records: [Option<Record>; EVENTS],
    waits: u32,
}

/// What an operation answered, in one type for comparing.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Claim(Claim),
    Renewal(Renewal),
    Completion(Completion),
    Release(Release),
}

impl Model {
    /// The live record of `event`, taking out one that ran out.
    fn live(&mut self, event: usize) -> &mut Option<Record> {
        let waits = self.waits;
        let slot = &mut self.records[event];
        if slot.is_some_and(|record| record.written.is_some_and(|at| at < waits)) {
            *slot = None;
        }
        slot
    }

    fn apply(&mut self, step: Step) -> Option<Answer> {
        let written = |short: bool, waits| short.then_some(waits);
        let waits = self.waits;
        Some(match step {
            Step::Wait => {
                self.waits += 1;
                return None;
            }
            Step::Claim {
                event,
                owner,
                short,
            } => {
                let live = self.live(event);
                Answer::Claim(match live {
                    Some(record) if record.completed => Claim::Completed,
                    Some(_) => Claim::InFlight,
                    None => {
                        let (completed, written) = (false, written(short, waits));
                        *live = Some(Record {
                            owner,
                            completed,
                            written,
                        });
                        Claim::Acquired
                    }
                })
            }
            Step::Renew {
                event,
                owner,
                short,
            } => {
                let live = self.live(event);
                Answer::Renewal(match live {
                    Some(record) if record.owner != owner => Renewal::TakenOver,
                    Some(record) if record.completed => Renewal::Held,
                    _ => {
                        let (completed, written) = (false, written(short, waits));
                        *live = Some(Record {
                            owner,
                            completed,
                            written,
                        });
                        Renewal::Held
                    }
                })
            }
            Step::Complete {
                event,
                owner,
                short,
            } => {
                let live = self.live(event);
                Answer::Completion(match live {
                    Some(record) if record.owner != owner => Completion::TakenOver,
                    _ => {
                        let (completed, written) = (true, written(short, waits));
                        *live = Some(Record {
                            owner,
                            completed,
                            written,
                        });
                        Completion::Recorded
                    }
                })
            }
            Step::Release { event, owner } => {
                let live = self.live(event);
                Answer::Release(match live {
                    Some(record) if record.owner == owner && !record.completed => {
                        *live = None;
                        Release::Released
                    }
                    _ => Release::NotHeld,
                })
            }
        })
    }
}

/// Where a store and the model first disagreed.
pub(crate) struct Failure {
    step: usize,
    expected: Answer,
    actual: Result<Answer, String>,
    /// Whether a short lease or retention written since the last wait may have run out in real
    /// time before the step (a slow machine): the disagreement then says nothing of the store.
    pub(crate) inconclusive: bool,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "step {}: the model answers {:?}, the store {:?}",
            self.step, self.expected, self.actual
        )?;
        if self.inconclusive {
            write!(
                f,
                " (each of five runs took longer than a short lease: too slow a machine)"
            )?;
        }
        Ok(())
    }
}

/// Runs `history` against `store` (on fresh ids) and the model, step by step.
pub(crate) async fn check(
    store: &dyn IdempotencyStore,
    history: &[Step],
    short: Duration,
    long: Duration,
) -> Result<(), Failure> {
    let ids: Vec<String> = (0..EVENTS)
        .map(|_| format!("evt_model_{}", ClaimToken::generate()))
        .collect();
    let tokens: Vec<ClaimToken> = (0..OWNERS).map(|_| ClaimToken::generate()).collect();
    let ttl = |short_ttl: bool| if short_ttl { short } else { long };
    let mut model = Model::default();
    let mut since_wait = std::time::Instant::now();
    for (index, &step) in history.iter().enumerate() {
        let actual = match step {
            Step::Wait => {
                tokio::time::sleep(short * 2 + short / 10).await;
                model.apply(step);
                since_wait = std::time::Instant::now();
                continue;
            }
            Step::Claim {
                event,
                owner,
                short,
            } => store
                .claim(Claimant::new(&ids[event], TYPE, &tokens[owner]), ttl(short))
                .await
                .map(Answer::Claim),
            Step::Renew {
                event,
                owner,
                short,
            } => store
                .renew(Claimant::new(&ids[event], TYPE, &tokens[owner]), ttl(short))
                .await
                .map(Answer::Renewal),
            Step::Complete {
                event,
                owner,
                short,
            } => store
                .complete(Claimant::new(&ids[event], TYPE, &tokens[owner]), ttl(short))
                .await
                .map(Answer::Completion),
            Step::Release { event, owner } => store
                .release(Claimant::new(&ids[event], TYPE, &tokens[owner]))
                .await
                .map(Answer::Release),
        };
        let expected = model.apply(step).expect("only a wait answers nothing");
        let actual = actual.map_err(|error| error.to_string());
        if actual.as_ref() != Ok(&expected) {
            return Err(Failure {
                step: index,
                expected,
                actual,
                inconclusive: since_wait.elapsed() >= short,
            });
        }
    }
    Ok(())
}
