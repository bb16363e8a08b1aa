//! The OpenAI-compatible chat protocol: wire types, the HTTP client with retry and backoff,
//! rate limiting, and the built-in scripted model (in-process and over HTTP).
