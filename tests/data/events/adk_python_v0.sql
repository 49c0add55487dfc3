-- ADK Python DatabaseSessionService schema v0 (ADK 1.19-1.21): pickled actions, no event_data.
CREATE TABLE sessions (app_name VARCHAR(128) NOT NULL, user_id VARCHAR(128) NOT NULL,
  id VARCHAR(128) NOT NULL, state TEXT NOT NULL, create_time DATETIME NOT NULL,
  update_time DATETIME NOT NULL, PRIMARY KEY (app_name, user_id, id));
CREATE TABLE events (id VARCHAR(128) NOT NULL, app_name VARCHAR(128) NOT NULL,
  user_id VARCHAR(128) NOT NULL, session_id VARCHAR(128) NOT NULL,
  invocation_id VARCHAR(256) NOT NULL, author VARCHAR(256) NOT NULL, branch VARCHAR(256),
  actions BLOB NOT NULL, long_running_tool_ids_json TEXT, timestamp DATETIME NOT NULL,
  content TEXT, grounding_metadata TEXT, custom_metadata TEXT, usage_metadata TEXT,
  citation_metadata TEXT, partial BOOLEAN, turn_complete BOOLEAN, error_code VARCHAR(256),
  error_message TEXT, interrupted BOOLEAN, input_transcription TEXT, output_transcription TEXT,
  PRIMARY KEY (id, app_name, user_id, session_id));
