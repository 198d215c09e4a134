//! The bundled mock agent over stdio (docs/api.md "The bundled mock agent"); the agent itself
//! is `turnstile::mock_agent`.

use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

#[tokio::main]
async fn main() -> agent_client_protocol::Result<()> {
    turnstile::mock_agent::serve(
        tokio::io::stdin().compat(),
        tokio::io::stdout().compat_write(),
        None,
    )
    .await
}
