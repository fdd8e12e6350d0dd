UPDATE {{table}} SET {{set}}, {{fence}} = $1 WHERE {{id}} = $2 AND ({{fence}} IS NULL OR {{fence}} <= $1)
