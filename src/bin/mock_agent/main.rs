//! The bundled mock agent over stdio (docs/api.md "The bundled mock agent"); the agent itself
//! is `turnstile::mock_agent`.

use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

/// One thread: the agent serves one session, and its ACP stream and MCP calls are ordered by
/// the server's marks, not by thread timing (decision 0033).
#[tokio::main(flavor = "current_thread")]
async fn main() -> agent_client_protocol::Result<()> {
    turnstile::mock_agent::serve(
        tokio::io::stdin().compat(),
        tokio::io::stdout().compat_write(),
        None,
    )
    .await
}
