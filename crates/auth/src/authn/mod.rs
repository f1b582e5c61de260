//! Authentication (placeholder).
