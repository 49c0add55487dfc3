-- SqliteSessionService's tables as google-adk 2.13 creates them (adk web's .adk/session.db).
CREATE TABLE app_states (app_name TEXT PRIMARY KEY, state TEXT NOT NULL, update_time REAL NOT NULL);
CREATE TABLE user_states (app_name TEXT NOT NULL, user_id TEXT NOT NULL, state TEXT NOT NULL,
  update_time REAL NOT NULL, PRIMARY KEY (app_name, user_id));
CREATE TABLE sessions (app_name TEXT NOT NULL, user_id TEXT NOT NULL, id TEXT NOT NULL,
  state TEXT NOT NULL, create_time REAL NOT NULL, update_time REAL NOT NULL,
  PRIMARY KEY (app_name, user_id, id));
CREATE TABLE events (id TEXT NOT NULL, app_name TEXT NOT NULL, user_id TEXT NOT NULL,
  session_id TEXT NOT NULL, invocation_id TEXT NOT NULL, timestamp REAL NOT NULL,
  event_data TEXT NOT NULL, PRIMARY KEY (app_name, user_id, session_id, id),
  FOREIGN KEY (app_name, user_id, session_id) REFERENCES sessions (app_name, user_id, id)
  ON DELETE CASCADE);
