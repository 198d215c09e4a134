//! `elicitation/create` received as the agent sent it (decision 0043). The SDK's typed
//! `CreateElicitationRequest` holds `requestedSchema.properties` in a `BTreeMap`, which sorts
//! the fields by name; E3 asks for the schema's own order, which only the raw JSON keeps
//! (`serde_json` is built with `preserve_order`). The service reads and checks every field it
//! uses itself (`clarification::elicitation::schema`), so nothing is lost by not parsing it
//! into the typed request.

use agent_client_protocol::{JsonRpcMessage, JsonRpcRequest, UntypedMessage};
use serde_json::Value;

pub const METHOD: &str = "elicitation/create";

/// The request's params, as received.
#[derive(Clone, Debug)]
pub struct ElicitationCreate(pub Value);

impl JsonRpcMessage for ElicitationCreate {
    fn matches_method(method: &str) -> bool {
        method == METHOD
    }

    fn method(&self) -> &str {
        METHOD
    }

    fn to_untyped_message(&self) -> Result<UntypedMessage, agent_client_protocol::Error> {
        UntypedMessage::new(METHOD, &self.0)
    }

    fn parse_message(method: &str, params: &Value) -> Result<Self, agent_client_protocol::Error> {
        if !Self::matches_method(method) {
            return Err(agent_client_protocol::Error::method_not_found());
        }
        if !params.is_object() {
            return Err(
                agent_client_protocol::Error::invalid_params().data(serde_json::json!(
                    "the params of elicitation/create must be an object"
                )),
            );
        }
        Ok(Self(params.clone()))
    }
}

impl JsonRpcRequest for ElicitationCreate {
    /// The `CreateElicitationResponse` as JSON (built by `elicitation::schema`).
    type Response = Value;
}
