//! Sessions agents call as tools: file-backed shell sessions (`delta-sessions`, spec v1.5)
//! and PTY sessions held by a detached holder process (`delta-sessions-pty`, spec v1.4).
