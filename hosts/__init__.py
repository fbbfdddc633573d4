"Example site consfigs, installed as consfig.hosts; demo.hy is the default consfig."
