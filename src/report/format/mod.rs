//! The formats a test's report is written in: text (thrulay's shape), CSV and JSON.

pub mod csv;
pub mod json;
pub(crate) mod text;
