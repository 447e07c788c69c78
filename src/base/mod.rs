//! What both sides of the host build on: bounded reads of regular files,
//! the span of each attempt with its OTLP export, and cron schedules.

pub(crate) mod files;
pub(crate) mod schedule;
pub(crate) mod trace;
