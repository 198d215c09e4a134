-- A4: the `authMethods` id the agent is asked to `authenticate` with after `initialize`.
ALTER TABLE agent_profiles ADD COLUMN auth_method TEXT;
