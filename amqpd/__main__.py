from amqpd.cli import main

main()
