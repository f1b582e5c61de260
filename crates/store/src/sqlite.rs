//! The embedded SQLite backend.
