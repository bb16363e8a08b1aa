//! The actix runtime: actors that own state and mailboxes and call the domain modules.
pub mod session;
