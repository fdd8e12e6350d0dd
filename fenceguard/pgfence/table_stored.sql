SELECT fence FROM {{table}} WHERE key = $1
