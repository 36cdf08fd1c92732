//! Captures the tracing events of one current-thread test: each event's level, message and
//! its own fields, never its spans' (a `warn` filter would turn those spans off in production).

use std::{
    collections::BTreeMap,
    fmt::Debug,
    sync::{Arc, Mutex},
};

use tracing::{
    Event, Level, Subscriber,
    field::{Field, Visit},
};
use tracing_subscriber::{Layer, layer::Context, prelude::*};

/// One captured event.
#[derive(Clone, Debug)]
pub struct Logged {
    pub level: Level,
    pub message: String,
    pub fields: BTreeMap<String, String>,
}

/// The events captured so far. Clones share them.
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<Logged>>>);

impl Logs {
    /// Captures every event of this thread until the guard is dropped.
    pub fn capture() -> (Self, tracing::subscriber::DefaultGuard) {
        let logs = Self::default();
        let guard = tracing_subscriber::registry()
            .with(Capture(logs.clone()))
            .set_default();
        (logs, guard)
    }

    /// The events whose message contains `text`.
    pub fn matching(&self, text: &str) -> Vec<Logged> {
        let events = self.0.lock().unwrap();
        events
            .iter()
            .filter(|event| event.message.contains(text))
            .cloned()
            .collect()
    }

    /// The one event whose message contains `text`; panics unless there is at least one.
    pub fn find(&self, text: &str) -> Logged {
        self.matching(text).into_iter().next().unwrap_or_else(|| {
            panic!(
                "no event says {text:?}; logged: {:#?}",
                self.0.lock().unwrap()
            )
        })
    }
}

struct Capture(Logs);

impl<S: Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut visitor = Fields::default();
        event.record(&mut visitor);
        let message = visitor.0.remove("message").unwrap_or_default();
        (self.0).0.lock().unwrap().push(Logged {
            level: *event.metadata().level(),
            message,
            fields: visitor.0,
        });
    }
}

#[derive(Default)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}
