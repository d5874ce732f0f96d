from workflow.launch import main

main()
