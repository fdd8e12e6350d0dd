CREATE TABLE IF NOT EXISTS {{table}} (key text PRIMARY KEY, fence bigint NOT NULL CHECK (fence > 0))
