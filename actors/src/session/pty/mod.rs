//! PTY sessions (placeholder).
