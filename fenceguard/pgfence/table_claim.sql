INSERT INTO {{table}} AS f (key, fence) VALUES ($1, $2)
ON CONFLICT (key) DO UPDATE SET fence = EXCLUDED.fence WHERE f.fence <= EXCLUDED.fence
RETURNING fence
