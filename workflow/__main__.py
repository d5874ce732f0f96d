from workflow.cli import main

main()
