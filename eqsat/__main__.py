from eqsat.cli.main import run

run()
