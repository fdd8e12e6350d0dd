SELECT {{fence}} FROM {{table}} WHERE {{id}} = $1
