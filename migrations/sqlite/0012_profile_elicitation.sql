-- E1: whether the profile's agent is told it may ask through ACP elicitation (an agent that
-- misbehaves with the capability can be run without it).
ALTER TABLE agent_profiles ADD COLUMN elicitation BOOLEAN NOT NULL DEFAULT TRUE;
