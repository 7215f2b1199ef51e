//! Internal events: each thing a service reports is one type whose [`InternalEvent::emit`]
//! writes its log line and updates its metrics together, with fixed, low-cardinality labels.
//! Call sites say what happened (`emit(BatchAbandoned { .. })`); how it is logged and counted
//! is written once, in the service's `events` module, next to the metric names it uses.

/// Something a service reports.
pub trait InternalEvent {
    /// Logs the event and updates its metrics.
    fn emit(self);
}

/// Emits `event` (see [`InternalEvent`]).
pub fn emit(event: impl InternalEvent) {
    event.emit();
}
