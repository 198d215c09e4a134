//! The bundled mock agent over stdio (docs/api.md "The bundled mock agent"); the agent itself
//! is `turnstile::mock_agent`.

use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

/// Multi-threaded on purpose: its stdout is written by a separate task (through tokio's
/// blocking pool) while its MCP calls go out on a socket. On one thread the HTTP call can leave
/// before the reply chunks it follows have been written at all, which no server-side ordering
/// can repair (decision 0033).
#[tokio::main]
async fn main() -> agent_client_protocol::Result<()> {
    turnstile::mock_agent::serve(
        tokio::io::stdin().compat(),
        tokio::io::stdout().compat_write(),
        None,
    )
    .await
}
